// Shared pieces of the nvidia-smi / nvidia-cuda-mps-control test doubles:
// the knob file, the call log, the GPU table and UUID tokens.
//
// The fakes run as non-root users and from a root prolog whose environment
// was built from scratch (no PATH, no HOME), so everything here depends only
// on libc/libstdc++ and finds its files relative to /proc/self/exe.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace fake {

inline std::string trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(first, last - first + 1));
}

inline std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    const auto pos = s.find(sep, start);
    parts.push_back(trim(s.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start)));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return parts;
}

inline std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// Whole-string non-negative integer, no sign, no spaces.
template <typename Int>
std::optional<Int> parse_uint(std::string_view s) {
  Int value{};
  if (s.empty() || s.front() == '-' || s.front() == '+') return std::nullopt;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return value;
}

inline std::string getenv_str(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

inline bool env_set(const char* name) { return std::getenv(name) != nullptr; }

// Directory of the running binary: tests put fake.conf / gpus.csv next to it,
// which works even when the caller passes no environment at all.
inline std::string exe_dir() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<size_t>(n));
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

inline void sleep_ms(long ms) {
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

// key=value knobs, re-read on every invocation because tests edit the file
// between runs. A missing file means all defaults; unknown keys are ignored.
class Config {
 public:
  static Config load() {
    Config cfg;
    const std::string path = env_set("UNILAB_FAKE_CONF") ? getenv_str("UNILAB_FAKE_CONF") : exe_dir() + "/fake.conf";
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      const std::string t = trim(line);
      if (t.empty() || t.front() == '#') continue;
      const auto eq = t.find('=');
      if (eq == std::string::npos) continue;
      cfg.values_[trim(std::string_view(t).substr(0, eq))] = trim(std::string_view(t).substr(eq + 1));
    }
    return cfg;
  }

  std::optional<std::string> get(const std::string& key) const {
    const auto it = values_.find(key);
    if (it == values_.end()) return std::nullopt;
    return it->second;
  }

  // Malformed or negative values fall back to the default (0 = off).
  long get_ms(const std::string& key) const {
    const auto v = get(key);
    if (!v) return 0;
    return parse_uint<long>(*v).value_or(0);
  }

  bool flag(const std::string& key) const {
    const auto v = get(key);
    if (!v) return false;
    const std::string l = lower(*v);
    return l == "1" || l == "true" || l == "yes" || l == "on";
  }

 private:
  std::map<std::string, std::string> values_;
};

// Appends `<tool> uid=<uid> pid=<pid> <argv...>` as one write(2) so lines of
// concurrent callers never interleave. Opened without O_CREAT first: with
// fs.protected_regular an O_CREAT open of another user's file in a sticky
// directory fails even when its mode allows writing. The creator makes the
// file 0666 (fchmod, because umask narrows the open mode) so every user of a
// test can append. Failures are ignored: logging must never change behaviour.
inline void log_call(const Config& cfg, std::string_view tool, int argc, char** argv) {
  const auto path = cfg.get("call_log");
  if (!path || path->empty()) return;
  std::string line(tool);
  line += " uid=" + std::to_string(::getuid()) + " pid=" + std::to_string(::getpid());
  for (int i = 0; i < argc; ++i) {
    line += ' ';
    line += argv[i];
  }
  line += '\n';
  int fd = ::open(path->c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0 && errno == ENOENT) {
    fd = ::open(path->c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_CREAT | O_EXCL, 0666);
    if (fd >= 0) {
      (void)::fchmod(fd, 0666);
    } else if (errno == EEXIST) {
      fd = ::open(path->c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
    }
  }
  if (fd < 0) return;
  (void)!::write(fd, line.data(), line.size());
  ::close(fd);
}

// ---- GPU table -------------------------------------------------------------

struct Gpu {
  unsigned index = 0;
  std::string uuid;
  std::string minor_number;  // kept as text: printed verbatim
  std::string bus_id;
  std::string name;
};

struct Mig {
  unsigned parent = 0;
  std::string uuid;
  std::string profile;
  unsigned device = 0;
  unsigned gi = 0;  // GPU instance id (default: device + 1)
  unsigned ci = 0;  // compute instance id
};

struct GpuTable {
  std::vector<Gpu> gpus;  // sorted by index
  std::vector<Mig> migs;  // in file order
};

// env UNILAB_FAKE_GPU_TABLE > gpu_table= knob > <exe dir>/gpus.csv
inline std::string gpu_table_path(const Config& cfg) {
  if (env_set("UNILAB_FAKE_GPU_TABLE")) return getenv_str("UNILAB_FAKE_GPU_TABLE");
  if (const auto v = cfg.get("gpu_table"); v && !v->empty()) return *v;
  return exe_dir() + "/gpus.csv";
}

// Reads `index, uuid, minor_number, pci.bus_id, name` lines and
// `MIG, parent, uuid, profile, device` lines. On failure returns nullopt and
// sets *error (unreadable file, or the first malformed line).
inline std::optional<GpuTable> read_gpu_table(const std::string& path, std::string* error) {
  std::ifstream in(path);
  if (!in) {
    *error = "cannot read GPU table " + path + ": " + std::strerror(errno);
    return std::nullopt;
  }
  GpuTable table;
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    const auto hash = line.find('#');
    const std::string t = trim(std::string_view(line).substr(0, hash));
    if (t.empty()) continue;
    const auto f = split(t, ',');
    const std::string where = path + ":" + std::to_string(lineno) + ": ";
    if (f[0] == "MIG") {
      Mig m;
      bool ok = (f.size() == 5 || f.size() == 7) && !f[2].empty() && !f[3].empty();
      if (ok) {
        const auto parent = parse_uint<unsigned>(f[1]);
        const auto device = parse_uint<unsigned>(f[4]);
        ok = parent && device;
        if (ok) {
          m = {*parent, f[2], f[3], *device, *device + 1, 0};
          if (f.size() == 7) {
            const auto gi = parse_uint<unsigned>(f[5]);
            const auto ci = parse_uint<unsigned>(f[6]);
            ok = gi && ci;
            if (ok) m.gi = *gi, m.ci = *ci;
          }
        }
      }
      if (!ok) {
        *error = where + "bad MIG line (MIG, parent index, uuid, profile, device[, gi, ci]): " + t;
        return std::nullopt;
      }
      table.migs.push_back(m);
      continue;
    }
    if (f.size() != 5) {
      *error = where + "expected 5 comma-separated fields: " + t;
      return std::nullopt;
    }
    const auto index = parse_uint<unsigned>(f[0]);
    if (!index || f[1].empty()) {
      *error = where + "bad GPU line: " + t;
      return std::nullopt;
    }
    table.gpus.push_back({*index, f[1], f[2], f[3], f[4]});
  }
  std::stable_sort(table.gpus.begin(), table.gpus.end(), [](const Gpu& a, const Gpu& b) { return a.index < b.index; });
  return table;
}

// Comparison token of an NVIDIA UUID: lowercase, no dashes, no optional
// `GPU-` prefix; MIG UUIDs keep `mig-` so they never equal a GPU.
inline std::string uuid_token(std::string_view value) {
  std::string l = lower(trim(value));
  std::string prefix;
  if (l.rfind("gpu-", 0) == 0) {
    l.erase(0, 4);
  } else if (l.rfind("mig-", 0) == 0) {
    l.erase(0, 4);
    prefix = "mig-";
  }
  l.erase(std::remove(l.begin(), l.end(), '-'), l.end());
  return prefix + l;
}

}  // namespace fake
