#include "sim/input_file.h"

#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "sim/errors.h"

namespace servesim {

void refuse_folder(const std::string& path, const std::string& named, const std::string& what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw InputError(fmt::format("{}: is a folder, not {}", named, what));
}

}  // namespace servesim
