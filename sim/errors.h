// Error types shared by every servesim library.
#pragma once

#include <stdexcept>
#include <string>

namespace servesim {

// Something the user gave us is wrong: a flag, a config file, a trace line.
// The message names the file/flag, the field and the allowed range. The CLI
// prints it and exits with status 2.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace servesim
