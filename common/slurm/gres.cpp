#include "common/slurm/gres.hpp"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include <fmt/format.h>

#include "common/mps/text.hpp"

#include "common/mps/errors.hpp"
#include "common/slurm/config_text.hpp"

namespace unilab::mps {
namespace {

bool to_int(std::string_view s, long& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

// Splits on commas that are not inside brackets.
std::vector<std::string_view> split_top(std::string_view s) {
  std::vector<std::string_view> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '[') ++depth;
    if (s[i] == ']') --depth;
    if (s[i] == ',' && depth == 0) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  out.push_back(s.substr(start));
  return out;
}

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view expr) {
  std::vector<std::string> out;
  // Slurm's own hostlists stop at 64 Ki names; without a bound, ranges that
  // multiply (`n[0-99999][0-99999]`) exhaust memory (found by fuzz_gres).
  constexpr size_t kMaxNames = 1 << 16;
  for (std::string_view part : split_top(trim(expr))) {
    part = trim(part);
    if (part.empty()) continue;
    size_t open = part.find('[');
    if (open == std::string_view::npos) {
      if (out.size() >= kMaxNames) throw CudaMpsError(fmt::format("'{}' expands to more than {} names", expr.substr(0, 80), kMaxNames));
      out.emplace_back(part);
      continue;
    }
    size_t close = part.find(']', open);
    if (close == std::string_view::npos) throw CudaMpsError(fmt::format("unbalanced '[' in '{}'", part));
    std::string prefix(part.substr(0, open));
    std::string_view inner = part.substr(open + 1, close - open - 1);
    std::vector<std::string> rests = expand_hostlist(part.substr(close + 1).empty() ? "" : part.substr(close + 1));
    if (rests.empty()) rests.push_back("");
    for (std::string_view r : split_top(inner)) {
      r = trim(r);
      size_t dash = r.find('-');
      std::string_view lo_s = dash == std::string_view::npos ? r : r.substr(0, dash);
      std::string_view hi_s = dash == std::string_view::npos ? r : r.substr(dash + 1);
      long lo = 0, hi = 0;
      if (!to_int(lo_s, lo) || !to_int(hi_s, hi) || lo < 0 || hi < lo || hi - lo > 100000) {
        throw CudaMpsError(fmt::format("bad range '{}' in '{}'", r, part));
      }
      if (static_cast<size_t>(hi - lo + 1) * rests.size() > kMaxNames - out.size()) {
        throw CudaMpsError(fmt::format("'{}' expands to more than {} names", expr.substr(0, 80), kMaxNames));
      }
      for (long n = lo; n <= hi; ++n) {
        std::string num = std::to_string(n);
        if (num.size() < lo_s.size()) num = std::string(lo_s.size() - num.size(), '0') + num;  // zero padding
        for (const auto& rest : rests) out.push_back(prefix + num + rest);
      }
    }
  }
  return out;
}

namespace {

// One gres.conf line applied to `conf` when it concerns `node`.
void apply_gres_line(const ConfigLine& line, const std::string& node, GresConf& conf) {
  std::optional<std::string> node_names, name, file, autodetect;
  for (const auto& word : line.words) {
    auto kv = split_key_value(word);
    if (!kv) throw CudaMpsError(fmt::format("gres.conf line {}: '{}' is not key=value", line.line, word));
    std::string key = kv->first;
    std::transform(key.begin(), key.end(), key.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (key == "nodename") node_names = kv->second;
    else if (key == "name") name = kv->second;
    else if (key == "file") file = kv->second;
    else if (key == "autodetect") autodetect = kv->second;
  }
  if (node_names) {
    auto nodes = expand_hostlist(*node_names);
    if (std::find(nodes.begin(), nodes.end(), node) == nodes.end()) return;
  }
  if (autodetect) conf.autodetect = *autodetect != "off";
  if (name && *name == "gpu" && file) {
    for (auto& f : expand_hostlist(*file)) conf.gpu_files.push_back(f);
  }
}

}  // namespace

GresConf parse_gres_conf(std::string_view text, const std::string& node) {
  GresConf conf;
  for (const auto& line : tokenize_config(text, "gres.conf", ConfigSyntax::kSlurm)) {
    if (line.include) {
      throw CudaMpsError(fmt::format("gres.conf line {}: Include is not supported here; put the node's GPU lines in "
                                     "gres.conf itself",
                                     line.line));
    }
    apply_gres_line(line, node, conf);
  }
  return conf;
}

int device_minor(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) return -1;
  return static_cast<int>(minor(st.st_rdev));
}

std::vector<GresGpuMapping> map_node_gpu_entries(const GresConf& conf, const std::vector<GpuIdentity>& gpus,
                                                 const std::function<int(const std::string&)>& minor_of) {
  std::vector<GresGpuMapping> out;
  if (conf.gpu_files.empty()) {
    if (!conf.autodetect) {
      throw CudaMpsError("gres.conf lists no Name=gpu File= entry for this node and AutoDetect is off; "
                         "add the GPU device files or set gres_conf= to the right file");
    }
    std::vector<GpuIdentity> sorted = gpus;
    std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.pci_bus_id < b.pci_bus_id; });
    for (size_t i = 0; i < sorted.size(); ++i) {
      out.push_back({static_cast<int>(i), fmt::format("/dev/nvidia{}", sorted[i].minor_number), sorted[i].minor_number,
                     sorted[i], ""});
    }
    return out;
  }
  for (size_t i = 0; i < conf.gpu_files.size(); ++i) {
    GresGpuMapping m;
    m.gres_index = static_cast<int>(i);
    m.device = conf.gpu_files[i];
    m.minor = minor_of(m.device);
    if (m.minor < 0) {
      m.problem = fmt::format("GRES gpu index {}: {} is not a character device; fix gres.conf File=", i, m.device);
    } else {
      for (const auto& g : gpus) if (g.minor_number == m.minor) m.gpu = g;
      if (!m.gpu) {
        m.problem = fmt::format("GRES gpu index {} ({}, minor {}) matches no GPU that nvidia-smi reports; "
                                "check gres.conf against `nvidia-smi --query-gpu=index,minor_number,uuid --format=csv`",
                                i, m.device, m.minor);
      }
    }
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<NodeGpu> map_node_gpus(const GresConf& conf, const std::vector<GpuIdentity>& gpus,
                                   int (*minor_of)(const std::string&)) {
  std::vector<NodeGpu> out;
  for (auto& m : map_node_gpu_entries(conf, gpus, minor_of)) {
    if (!m.problem.empty()) throw CudaMpsError(m.problem);
    out.push_back({m.gres_index, m.device, m.minor, m.gpu->uuid});
  }
  return out;
}

std::vector<int> parse_gpu_index_list(std::string_view value) {
  std::vector<int> out;
  if (trim(value).empty()) return out;
  for (const auto& e : expand_hostlist(std::string("[") + std::string(trim(value)) + "]")) {
    long n = 0;
    if (!to_int(e, n) || n < 0 || n > 4096) throw CudaMpsError(fmt::format("bad GPU index '{}' in '{}'", e, value));
    out.push_back(static_cast<int>(n));
  }
  return out;
}

}  // namespace unilab::mps
