// Reads typed values from a fuzzer's input, front to back; past the end
// every read returns zero (the input is never read out of bounds).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace sluice::fuzz {

class Input {
 public:
  Input(const uint8_t* data, size_t size) : p_(data), left_(size) {}
  bool empty() const { return left_ == 0; }
  size_t left() const { return left_; }

  template <typename T>
  T take() {
    T v{};
    size_t n = left_ < sizeof(T) ? left_ : sizeof(T);
    if (n) std::memcpy(&v, p_, n);
    p_ += n;
    left_ -= n;
    return v;
  }
  // Up to `max` bytes into `out` (zero-filled beyond what is left); returns
  // how many came from the input.
  size_t take_bytes(void* out, size_t max) {
    size_t n = left_ < max ? left_ : max;
    std::memset(out, 0, max);
    if (n) std::memcpy(out, p_, n);
    p_ += n;
    left_ -= n;
    return n;
  }
  std::string rest() {
    std::string s(reinterpret_cast<const char*>(p_), left_);
    p_ += left_;
    left_ = 0;
    return s;
  }

 private:
  const uint8_t* p_;
  size_t left_;
};

}  // namespace sluice::fuzz

// A broken invariant: abort, so libFuzzer (or the replay driver) reports
// the input.
#define FUZZ_CHECK(cond)                                                                \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)
