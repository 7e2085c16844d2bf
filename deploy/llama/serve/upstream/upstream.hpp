/* What the C++ bridge's files share (upstream.h, templates.h,
 * sampler.h over llama.cpp's common library): JSON in and out under
 * llama-server's names, a request's fault as an exception worded for a
 * 400, and the guard that keeps every exception on this side of the C
 * interface. C++ only; internal to serve/upstream/. */
#ifndef EVICTD_LLAMA_UPSTREAM_HPP
#define EVICTD_LLAMA_UPSTREAM_HPP

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "json.h"
#include "llama.h"

namespace up {

typedef common_json json;

/* A request's fault, answered as it is worded (a 400 upstream). */
struct bad : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

inline int fail(char *err, size_t errlen, const char *what) {
  if (err != nullptr && errlen > 0)
    snprintf(err, errlen, "%s", what);
  return -1;
}

/* Runs fn, which returns 0 or -1; every exception becomes -1 with its
 * sentence, so none crosses into C. */
template <typename F> int guard(char *err, size_t errlen, F fn) {
  try {
    return fn();
  } catch (const std::bad_alloc &) {
    return fail(err, errlen, "out of memory");
  } catch (const std::exception &e) {
    return fail(err, errlen, e.what());
  } catch (...) {
    return fail(err, errlen, "llama.cpp failed for an unknown reason");
  }
}

/* s as a malloc'd C string into *out. */
inline int give(const std::string &s, char **out) {
  *out = static_cast<char *>(malloc(s.size() + 1));
  if (*out == nullptr)
    throw std::bad_alloc();
  memcpy(*out, s.c_str(), s.size() + 1);
  return 0;
}

inline json parse(const char *text, const char *what) {
  if (text == nullptr)
    throw bad(std::string(what) + " is missing");
  json j = json::parse_no_throw(text);
  if (j.is_discarded() || !j.is_object())
    throw bad(std::string(what) + " must be a JSON object");
  return j;
}

/* The field when it is there and not null: llama-server treats null as
 * absent, so that a client may ask for the default. */
inline const json *field(const json &body, const char *name) {
  return body.contains(name) && !body.at(name).is_null() ? &body.at(name)
                                                          : nullptr;
}

inline std::string quoted(const char *name) {
  return std::string("\"") + name + "\"";
}

inline std::string shortest(double d) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%.10g", d);
  return buf;
}

inline std::string str(const json &body, const char *name,
                       const std::string &def) {
  const json *v = field(body, name);
  if (v == nullptr)
    return def;
  if (!v->is_string())
    throw bad(quoted(name) + " must be a string");
  return v->get<std::string>();
}

inline bool flag(const json &body, const char *name, bool def) {
  const json *v = field(body, name);
  if (v == nullptr)
    return def;
  if (!v->is_boolean())
    throw bad(quoted(name) + " must be true or false");
  return v->get<bool>();
}

/* A number within [lo, hi]: clamped into it where llama-server clamps
 * (its soft limits), refused outside it where it refuses. */
template <typename T>
void number(const json &body, const char *name, T &dst, double lo, double hi,
            bool clamp) {
  const json *v = field(body, name);
  if (v == nullptr)
    return;
  if (!v->is_number())
    throw bad(quoted(name) + " must be a number");
  double d = v->get<double>();
  if (std::is_integral<T>::value && d != std::floor(d))
    throw bad(quoted(name) + " must be an integer");
  if (d < lo || d > hi) {
    if (!clamp)
      throw bad(quoted(name) + " must be between " + shortest(lo) +
                " and " + shortest(hi));
    d = std::max(lo, std::min(hi, d));
  }
  dst = static_cast<T>(d);
}

inline const double BIG = std::numeric_limits<int32_t>::max();
inline const double INF = std::numeric_limits<double>::infinity();

} // namespace up

#endif
