// Refusing the fields a JSON input does not know, so that a misspelled key
// (say "atention_launches" in a profile) is an error naming it rather than
// a setting silently left at its default.
#pragma once

#include <initializer_list>
#include <string>

#include <nlohmann/json.hpp>

namespace servesim {

// Throws InputError "WHERE: unknown field 'KEY' (allowed: a, b, ...)" for
// the first key of the object `j` that is not in `allowed`; a value that is
// not an object passes (its type is checked where it is read).
void require_known_fields(const nlohmann::json& j, std::initializer_list<const char*> allowed,
                          const std::string& where);

}  // namespace servesim
