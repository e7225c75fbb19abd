// Settings from the environment (env.h).
#include "env.h"

#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace distsampler {
namespace detail {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

double env_number(const char* name, double fallback, double low, double high, bool integer,
                  const char* allowed) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(v >= low && v <= high) ||
      (integer && v != std::floor(v))) {
    throw std::invalid_argument(std::string(name) + " = '" + text + "'; allowed: " + allowed);
  }
  return v;
}

}  // namespace detail
}  // namespace distsampler
