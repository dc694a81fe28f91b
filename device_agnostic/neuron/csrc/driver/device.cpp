// Devices: how many, what they are, the current one, synchronizing one.
//
// Emulation: the devices are NeuronCores named by NEURON_RT_VISIBLE_CORES (as
// AWS's Neuron runtime reads it) and each has NEURON_DEVICE_MEMORY bytes of
// memory (host memory, see memory.cpp). Both are read once, as a real runtime
// reads its environment at start-up.
#include "internal.h"

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <utility>

namespace {

constexpr const char* kVisibleCoresEnv = "NEURON_RT_VISIBLE_CORES";
constexpr const char* kDeviceMemoryEnv = "NEURON_DEVICE_MEMORY";
constexpr int kDefaultDeviceCount = 2;
constexpr size_t kDefaultCapacity = size_t{16} << 30;

thread_local int tls_current_device = 0;

std::string trim(const std::string& text) {
  size_t begin = 0;
  size_t end = text.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) {
    ++begin;
  }
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) {
    --end;
  }
  return text.substr(begin, end - begin);
}

// Parses a non-negative decimal integer; false on anything else.
bool parse_index(const std::string& text, long* out) {
  if (text.empty() || text.size() > 6) {
    return false;
  }
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) {
      return false;
    }
  }
  *out = std::stol(text);
  return true;
}

// NEURON_RT_VISIBLE_CORES follows the Neuron runtime: "0-3" (a range),
// "0,2,5" (a list), "1" (one core), or a list of ranges. Each core is named
// once and the count of cores is the device count; the cores' own ids are not
// exposed. A core named twice ("0,0", "0-2,1") or an empty entry ("1,") is an
// error, not a smaller count: it is a typo, and the user expects more devices.
// Returns -1 and fills `error` on a malformed value.
int parse_visible_cores(const char* raw, std::string* error) {
  const std::string value(raw);
  if (trim(value).empty()) {
    *error = "it names no core";
    return -1;
  }
  std::set<long> cores;
  size_t begin = 0;
  while (begin <= value.size()) {
    // std::getline would drop an empty last entry ("1,"): split by hand.
    size_t comma = value.find(',', begin);
    if (comma == std::string::npos) {
      comma = value.size();
    }
    const std::string item = trim(value.substr(begin, comma - begin));
    begin = comma + 1;
    if (item.empty()) {
      *error = "it has an empty entry";
      return -1;
    }
    const auto dash = item.find('-');
    long first = 0;
    long last = 0;
    bool ok = false;
    if (dash == std::string::npos) {
      ok = parse_index(item, &first);
      last = first;
    } else {
      ok = parse_index(trim(item.substr(0, dash)), &first) &&
          parse_index(trim(item.substr(dash + 1)), &last) && first <= last;
    }
    if (!ok) {
      *error = "'" + item + "' is not a core index or an ascending range";
      return -1;
    }
    for (long core = first; core <= last; ++core) {
      if (!cores.insert(core).second) {
        *error = "core " + std::to_string(core) + " is named twice";
        return -1;
      }
      if (static_cast<int>(cores.size()) > ndrv::kMaxDevices) {
        *error = "more than " + std::to_string(ndrv::kMaxDevices) + " cores";
        return -1;
      }
    }
  }
  return static_cast<int>(cores.size());
}

// A value read from the environment once: the value, or why it is malformed.
template <typename T>
struct Setting {
  T value{};
  std::string error; // empty when the value is good
};

const Setting<int>& device_count_setting() {
  static const Setting<int> setting = [] {
    Setting<int> s;
    const char* raw = std::getenv(kVisibleCoresEnv);
    if (raw == nullptr) {
      s.value = kDefaultDeviceCount;
      return s;
    }
    s.value = parse_visible_cores(raw, &s.error);
    if (s.value < 0) {
      s.error = std::string("Invalid ") + kVisibleCoresEnv + "='" + raw + "': " + s.error +
          ". Use a core index (\"1\"), a list (\"0,2,5\") or a range (\"0-3\"), or unset it "
          "for the default of " + std::to_string(kDefaultDeviceCount) + " devices.";
    }
    return s;
  }();
  return setting;
}

const Setting<size_t>& capacity_setting() {
  static const Setting<size_t> setting = [] {
    Setting<size_t> s;
    const char* raw = std::getenv(kDeviceMemoryEnv);
    if (raw == nullptr) {
      s.value = kDefaultCapacity;
      return s;
    }
    const std::string text = trim(raw);
    size_t digits = 0;
    while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) {
      ++digits;
    }
    std::string unit = trim(text.substr(digits));
    for (auto& c : unit) {
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    const std::pair<const char*, size_t> units[] = {
        {"", 1},             {"b", 1},            {"kib", 1ull << 10},
        {"mib", 1ull << 20}, {"gib", 1ull << 30}, {"tib", 1ull << 40},
        {"kb", 1000ull},     {"mb", 1000000ull},  {"gb", 1000000000ull},
        {"k", 1ull << 10},   {"m", 1ull << 20},   {"g", 1ull << 30}};
    size_t multiplier = 0;
    for (const auto& [name, factor] : units) {
      if (unit == name) {
        multiplier = factor;
      }
    }
    if (digits == 0 || digits > 15 || multiplier == 0) {
      s.error = std::string("Invalid ") + kDeviceMemoryEnv + "='" + raw +
          "': expected a size such as 512MiB, 16GiB or a byte count.";
      return s;
    }
    s.value = std::stoull(text.substr(0, digits)) * multiplier;
    if (s.value == 0) {
      s.error = std::string("Invalid ") + kDeviceMemoryEnv + "='" + raw +
          "': the capacity must be positive.";
    }
    return s;
  }();
  return setting;
}

} // namespace

namespace ndrv {

ndrvError_t device_count(int* count) {
  const auto& setting = device_count_setting();
  if (!setting.error.empty()) {
    return fail(ndrvErrorInitializationError, setting.error);
  }
  *count = setting.value;
  return ndrvSuccess;
}

ndrvError_t check_device(int device) {
  int count = 0;
  if (const auto error = device_count(&count); error != ndrvSuccess) {
    return error;
  }
  if (device < 0 || device >= count) {
    return fail(ndrvErrorInvalidDevice, "device " + std::to_string(device) + " is not in [0, " +
                                            std::to_string(count) + ")");
  }
  return ndrvSuccess;
}

ndrvError_t device_capacity(size_t* bytes) {
  const auto& setting = capacity_setting();
  if (!setting.error.empty()) {
    return fail(ndrvErrorInitializationError, setting.error);
  }
  *bytes = setting.value;
  return ndrvSuccess;
}

int current_device() {
  return tls_current_device;
}

} // namespace ndrv

extern "C" {

ndrvError_t ndrvGetDeviceCount(int* count) {
  if (count == nullptr) {
    return ndrv::fail(ndrvErrorInvalidValue, "ndrvGetDeviceCount: count is NULL");
  }
  return ndrv::device_count(count);
}

ndrvError_t ndrvGetDeviceProperties(ndrvDeviceProp* prop, int device) {
  if (prop == nullptr) {
    return ndrv::fail(ndrvErrorInvalidValue, "ndrvGetDeviceProperties: prop is NULL");
  }
  if (const auto error = ndrv::check_device(device); error != ndrvSuccess) {
    return error;
  }
  size_t capacity = 0;
  if (const auto error = ndrv::device_capacity(&capacity); error != ndrvSuccess) {
    return error;
  }
  std::memset(prop, 0, sizeof(*prop));
  std::strncpy(prop->name, "NeuronCore (emulated on host memory)", sizeof(prop->name) - 1);
  prop->totalGlobalMem = capacity;
  return ndrvSuccess;
}

ndrvError_t ndrvSetDevice(int device) {
  if (const auto error = ndrv::check_device(device); error != ndrvSuccess) {
    return error;
  }
  tls_current_device = device;
  return ndrvSuccess;
}

ndrvError_t ndrvGetDevice(int* device) {
  if (device == nullptr) {
    return ndrv::fail(ndrvErrorInvalidValue, "ndrvGetDevice: device is NULL");
  }
  *device = tls_current_device;
  return ndrvSuccess;
}

} // extern "C"
