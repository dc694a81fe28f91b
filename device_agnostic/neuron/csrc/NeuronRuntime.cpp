// Devices, the current device, lazy initialization and fork safety.
#include "NeuronRuntime.h"

#include <c10/util/Exception.h>

#include <pthread.h>

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <mutex>
#include <set>
#include <sstream>
#include <string>

namespace neuron {
namespace {

constexpr const char* kVisibleCoresEnv = "NEURON_RT_VISIBLE_CORES";
constexpr const char* kDeviceMemoryEnv = "NEURON_DEVICE_MEMORY";
constexpr c10::DeviceIndex kDefaultDeviceCount = 2;
constexpr int kMaxDevices = 64;
// cudaErrorInvalidDevice's value: the error code an AcceleratorError for an
// invalid device ordinal carries on CUDA.
constexpr int32_t kInvalidDeviceErrorCode = 101;
constexpr size_t kDefaultCapacity = size_t{16} << 30;

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
      if (static_cast<int>(cores.size()) > kMaxDevices) {
        *error = "more than " + std::to_string(kMaxDevices) + " cores";
        return -1;
      }
    }
  }
  return static_cast<int>(cores.size());
}

struct DeviceCountResult {
  int count = -1;
  std::string error;
};

// The environment is read once, as a real runtime reads it at start-up.
const DeviceCountResult& device_count_result() {
  static const DeviceCountResult result = [] {
    DeviceCountResult r;
    const char* raw = std::getenv(kVisibleCoresEnv);
    if (raw == nullptr) {
      r.count = kDefaultDeviceCount;
    } else {
      r.count = parse_visible_cores(raw, &r.error);
      if (r.count < 0) {
        r.error = std::string("Invalid ") + kVisibleCoresEnv + "='" + raw +
            "': " + r.error + ". Use a core index (\"1\"), a list (\"0,2,5\") "
            "or a range (\"0-3\"), or unset it for the default of " +
            std::to_string(kDefaultDeviceCount) + " devices.";
      }
    }
    return r;
  }();
  return result;
}

thread_local c10::DeviceIndex tls_current_device = 0;

std::atomic<bool> g_initialized{false};
std::atomic<bool> g_in_bad_fork{false};
std::once_flag g_atfork_once;

// Like CUDA: a child forked after initialization cannot use the device.
void on_fork_child() {
  if (g_initialized.load()) {
    g_in_bad_fork.store(true);
  }
  g_initialized.store(false);
}

} // namespace

c10::DeviceIndex device_count() {
  const auto& result = device_count_result();
  TORCH_CHECK(result.count >= 0, result.error);
  return static_cast<c10::DeviceIndex>(result.count);
}

c10::DeviceIndex device_count_noexcept() noexcept {
  const auto& result = device_count_result();
  return result.count < 0 ? 0 : static_cast<c10::DeviceIndex>(result.count);
}

void check_device_index(c10::DeviceIndex index) {
  const auto count = device_count();
  if (index >= 0 && index < count) {
    return;
  }
  // An AcceleratorError (a RuntimeError in Python), as CUDA raises for an
  // invalid ordinal: code written `except RuntimeError` must catch ours too.
  throw c10::AcceleratorError(
      {__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, kInvalidDeviceErrorCode,
      c10::str("Invalid neuron device index ", static_cast<int>(index), ": this process has ",
               static_cast<int>(count), " neuron device(s), so the index must be in [0, ",
               static_cast<int>(count), "). Set ", kVisibleCoresEnv,
               " (e.g. \"0-3\") to expose more NeuronCores."));
}

c10::DeviceIndex resolve_device_index(c10::DeviceIndex index) {
  if (index == -1) {
    return current_device();
  }
  check_device_index(index);
  return index;
}

c10::DeviceIndex current_device() {
  return tls_current_device;
}

void set_device(c10::DeviceIndex index) {
  check_device_index(index);
  if (index != tls_current_device) {
    lazy_init();
  }
  tls_current_device = index;
}

void lazy_init() {
  if (g_initialized.load(std::memory_order_acquire)) {
    return;
  }
  TORCH_CHECK(
      !g_in_bad_fork.load(),
      "Cannot re-initialize neuron in forked subprocess. To use neuron with "
      "multiprocessing, you must use the 'spawn' start method "
      "(multiprocessing.set_start_method('spawn')).");
  device_count(); // a malformed environment fails here, loudly
  std::call_once(g_atfork_once, [] {
    pthread_atfork(nullptr, nullptr, &on_fork_child);
  });
  g_initialized.store(true, std::memory_order_release);
}

bool is_initialized() {
  return g_initialized.load();
}

bool is_in_bad_fork() {
  return g_in_bad_fork.load();
}

size_t device_memory_capacity() {
  static const size_t capacity = [] {
    const char* raw = std::getenv(kDeviceMemoryEnv);
    if (raw == nullptr) {
      return kDefaultCapacity;
    }
    const std::string text = trim(raw);
    size_t digits = 0;
    while (digits < text.size() &&
           std::isdigit(static_cast<unsigned char>(text[digits]))) {
      ++digits;
    }
    std::string unit = trim(text.substr(digits));
    for (auto& c : unit) {
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    const std::pair<const char*, size_t> units[] = {
        {"", 1},          {"b", 1},         {"kib", 1ull << 10},
        {"mib", 1ull << 20}, {"gib", 1ull << 30}, {"tib", 1ull << 40},
        {"kb", 1000ull},  {"mb", 1000000ull}, {"gb", 1000000000ull},
        {"k", 1ull << 10}, {"m", 1ull << 20},  {"g", 1ull << 30}};
    size_t multiplier = 0;
    for (const auto& [name, factor] : units) {
      if (unit == name) {
        multiplier = factor;
      }
    }
    const bool ok = digits > 0 && digits <= 15 && multiplier > 0;
    TORCH_CHECK(
        ok, "Invalid ", kDeviceMemoryEnv, "='", raw,
        "': expected a size such as 512MiB, 16GiB or a byte count.");
    const size_t value = std::stoull(text.substr(0, digits)) * multiplier;
    TORCH_CHECK(value > 0, "Invalid ", kDeviceMemoryEnv, "='", raw,
                "': the capacity must be positive.");
    return value;
  }();
  return capacity;
}

std::string format_bytes(size_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  std::ostringstream out;
  out.precision(unit == 0 ? 0 : 2);
  out << std::fixed << value << " " << units[unit];
  return out.str();
}

bool is_supported_dtype(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Double:
    case c10::ScalarType::ComplexDouble:
      return false;
    default:
      return !c10::isQIntType(dtype);
  }
}

void check_supported_dtype(c10::ScalarType dtype) {
  if (is_supported_dtype(dtype)) {
    return;
  }
  check_not_quantized(dtype);
  // Python's names, since that is what users write.
  const bool complex = dtype == c10::ScalarType::ComplexDouble;
  const char* name = complex ? "torch.complex128" : "torch.float64";
  TORCH_CHECK_TYPE(false, "Cannot create or move a ", name,
                   " tensor to neuron: the NeuronCore does not support ", name, ". Please use ",
                   complex ? "torch.complex64" : "torch.float32", " instead.");
}

void check_not_quantized(c10::ScalarType dtype) {
  if (!c10::isQIntType(dtype)) {
    return;
  }
  const auto name = std::string(c10::getDtypeNames(dtype).first);
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, "Cannot create or move a quantized tensor (torch.", name,
      ") to neuron: the neuron backend has no quantized kernels. Dequantize it first "
      "(tensor.dequantize()) and move the float tensor, or keep quantized tensors on the CPU.");
}

} // namespace neuron
