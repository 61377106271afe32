// deepinfer/str_cat.h — build an error message from pieces: cat("seq ", id, " unknown").
#pragma once

#include <sstream>
#include <string>

namespace deepinfer {

template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

}  // namespace deepinfer
