// A file the user named, checked before it is opened.
#pragma once

#include <string>

namespace servesim {

// InputError "`named`: is a folder, not `what`" when `path` is a folder:
// std::ifstream opens a folder without failing, and reading it then throws
// from inside the parser ("basic_filebuf::underflow ... Is a directory").
// `named` is how the message names it ("--profile d", or the path alone).
void refuse_folder(const std::string& path, const std::string& named, const std::string& what);

}  // namespace servesim
