// env.h: settings read from the environment, each bad value one error naming the variable.
#ifndef DISTSAMPLER_SRC_IO_ENV_H_
#define DISTSAMPLER_SRC_IO_ENV_H_

#include <string>

namespace distsampler {
namespace detail {

// Environment variable `name`, or "" when it is unset.
std::string env(const char* name);

// The number in environment variable `name`, or `fallback` when it is unset or empty. Throws
// std::invalid_argument naming the variable, its value and `allowed` unless it is a number in
// [low, high] (an integer when `integer`).
double env_number(const char* name, double fallback, double low, double high, bool integer,
                  const char* allowed);

}  // namespace detail
}  // namespace distsampler

#endif  // DISTSAMPLER_SRC_IO_ENV_H_
