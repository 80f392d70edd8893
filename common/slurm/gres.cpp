#include "common/slurm/gres.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <cctype>
#include <charconv>

#include <fmt/format.h>

#include "common/mps/text.hpp"

#include "common/mps/errors.hpp"
#include "common/mps/safefs.hpp"
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
  std::optional<std::string> node_names, name, file, multiple_files, type, autodetect;
  for (const auto& word : line.words) {
    auto kv = split_key_value(word);
    if (!kv) throw CudaMpsError(fmt::format("gres.conf line {}: '{}' is not key=value", line.line, word));
    std::string key = kv->first;
    std::transform(key.begin(), key.end(), key.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (key == "nodename") node_names = kv->second;
    else if (key == "name") name = kv->second;
    else if (key == "file" || key == "files") file = kv->second;
    else if (key == "multiplefiles") multiple_files = kv->second;
    else if (key == "type") type = kv->second;
    else if (key == "autodetect") autodetect = kv->second;
  }
  if (node_names) {
    auto nodes = expand_hostlist(*node_names);
    if (std::find(nodes.begin(), nodes.end(), node) == nodes.end()) return;
  }
  if (autodetect) conf.autodetect = *autodetect != "off";
  if (!name || *name != "gpu") return;
  // Slurm (gres.c, _parse_gres_config): File= and MultipleFiles= exclude
  // each other; MultipleFiles= is one GRES and must name several files.
  if (file && multiple_files) {
    throw CudaMpsError(fmt::format("gres.conf line {}: File= and MultipleFiles= exclude each other (Slurm refuses the line)", line.line));
  }
  if (file) {
    for (auto& f : expand_hostlist(*file)) conf.gpus.push_back({{f}, type.value_or("")});
  } else if (multiple_files) {
    auto files = expand_hostlist(*multiple_files);
    if (files.size() < 2) {
      throw CudaMpsError(fmt::format("gres.conf line {}: MultipleFiles= names {} file; use File= for one", line.line, files.size()));
    }
    conf.gpus.push_back({std::move(files), type.value_or("")});
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

std::vector<GresGpuEntry> order_gres_as_slurm(GresConf& conf, const std::vector<NodeGres>& node_gres) {
  if (node_gres.empty()) return {};
  std::vector<GresGpuEntry> left = std::move(conf.gpus), ordered;
  for (const NodeGres& g : node_gres) {
    for (unsigned long n = 0; n < g.count; ++n) {
      auto it = std::find_if(left.begin(), left.end(),
                             [&](const GresGpuEntry& e) { return g.type.empty() || lower(e.type) == lower(g.type); });
      if (it == left.end()) break;
      ordered.push_back(std::move(*it));
      left.erase(it);
    }
  }
  conf.gpus = std::move(ordered);
  return left;
}

int device_minor(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) return -1;
  return static_cast<int>(minor(st.st_rdev));
}

namespace {

// A GPU (File=) entry: its minor is one nvidia-smi GPU's minor_number.
GresGpuMapping map_gpu_file(int i, const std::string& file, const std::vector<GpuIdentity>& gpus,
                            const std::function<int(const std::string&)>& minor_of) {
  GresGpuMapping m;
  m.gres_index = i;
  m.device = file;
  m.files = {file};
  m.minor = minor_of(m.device);
  if (m.minor < 0) {
    m.problem = fmt::format("GRES gpu index {}: {} is not a character device; fix gres.conf File=", i, m.device);
    return m;
  }
  for (const auto& g : gpus) {
    if (!g.mig && g.minor_number == m.minor) m.gpu = g;
  }
  if (!m.gpu) {
    std::vector<std::string> unknown;
    for (const auto& g : gpus) {
      if (!g.mig && g.minor_number < 0) unknown.push_back(fmt::format("GPU {} ({})", g.index, g.pci_bus_id));
    }
    m.problem = fmt::format("GRES gpu index {} ({}, minor {}) matches no GPU that nvidia-smi reports; {}", i, m.device, m.minor,
                            unknown.empty()
                                ? "check gres.conf against the GPUs' minors (`Device Minor` in /proc/driver/nvidia/gpus/<bus>/information)"
                                : fmt::format("the driver gave no minor for {} (`Device Minor` in its "
                                              "/proc/driver/nvidia/gpus/<bus>/information; plugin argument driver_proc=)",
                                              join(unknown, ", ")));
  }
  return m;
}

// A MultipleFiles= entry: a MIG slice, /dev/nvidia<parent>,<GI cap>,<CI cap>.
GresGpuMapping map_mig_files(int i, const std::vector<std::string>& files, const std::vector<GpuIdentity>& gpus,
                             const std::function<int(const std::string&)>& minor_of, const MigCaps& caps) {
  GresGpuMapping m;
  m.gres_index = i;
  m.files = files;
  m.device = files.back();
  m.minor = minor_of(m.device);
  auto fail = [&](std::string why) {
    m.problem = fmt::format("GRES gpu index {} (MultipleFiles={}): {}", i, join(files, ","), why);
    return m;
  };
  if (files.size() != 3) {
    return fail("a MIG slice is three files: its GPU, its GPU instance capability and its compute instance capability "
                "(/dev/nvidiaN,/dev/nvidia-caps/nvidia-capG,/dev/nvidia-caps/nvidia-capC)");
  }
  int minors[3];
  for (size_t k = 0; k < 3; ++k) {
    minors[k] = minor_of(files[k]);
    if (minors[k] < 0) return fail(fmt::format("{} is not a character device", files[k]));
  }
  auto parent = std::find_if(gpus.begin(), gpus.end(), [&](const auto& g) { return !g.mig && g.minor_number == minors[0]; });
  if (parent == gpus.end()) return fail(fmt::format("{} (minor {}) is no GPU that nvidia-smi reports", files[0], minors[0]));
  if (!mig_enabled(*parent)) {
    return fail(fmt::format("GPU {} ({}) has MIG {}; list it with File={} instead", parent->index, parent->uuid,
                            parent->mig_mode.empty() ? "disabled" : parent->mig_mode, files[0]));
  }
  if (!caps.minors) return fail(caps.error);
  auto inst = caps.minors->instance_of(minors[0], minors[1], minors[2]);
  if (!inst) {
    return fail(fmt::format("capability minors {} and {} are no GPU instance and compute instance of gpu{} in {}", minors[1],
                            minors[2], minors[0], kMigMinorsPath));
  }
  for (const auto& g : gpus) {
    if (g.mig && g.mig->parent_uuid == parent->uuid && g.mig->gpu_instance == inst->first &&
        g.mig->compute_instance == inst->second) {
      m.gpu = g;
    }
  }
  if (!m.gpu) {
    return fail(fmt::format("nvidia-smi lists no MIG device with GPU instance {} and compute instance {} on GPU {} (`nvidia-smi` "
                            "shows them under \"MIG devices\"); check gres.conf against the node's MIG layout",
                            inst->first, inst->second, parent->index));
  }
  return m;
}

// AutoDetect: Slurm's gpu/nvml records, in its order (see the header).
std::vector<GresGpuMapping> autodetected_entries(const std::vector<GpuIdentity>& gpus, const MigCaps& caps) {
  std::vector<GpuIdentity> whole, migs;
  for (const auto& g : gpus) {
    if (g.mig) {
      migs.push_back(g);
    } else if (!mig_enabled(g)) {
      whole.push_back(g);
    }
  }
  std::sort(whole.begin(), whole.end(), [](const auto& a, const auto& b) { return a.pci_bus_id < b.pci_bus_id; });
  auto gi_cap = [&](const GpuIdentity& g) {
    return caps.minors ? caps.minors->gi_minor(g.mig->parent_minor, g.mig->gpu_instance).value_or(-1) : -1;
  };
  std::stable_sort(migs.begin(), migs.end(), [&](const auto& a, const auto& b) {
    return std::pair(a.mig->parent_minor, gi_cap(a)) < std::pair(b.mig->parent_minor, gi_cap(b));
  });
  std::vector<GresGpuMapping> out;
  for (const auto& g : whole) {
    const std::string dev = fmt::format("/dev/nvidia{}", g.minor_number);
    out.push_back({static_cast<int>(out.size()), dev, {dev}, g.minor_number, g, ""});
  }
  for (const auto& g : migs) {
    GresGpuMapping m{static_cast<int>(out.size()), "", {}, -1, g, ""};
    if (caps.minors) m.files = mig_device_files(*g.mig, *caps.minors);
    if (m.files.empty()) {
      m.problem = fmt::format("GRES gpu index {} ({}): its capability files are unknown ({})", m.gres_index, g.uuid,
                              caps.minors ? fmt::format("GPU instance {} and compute instance {} of gpu{} are not in {}",
                                                        g.mig->gpu_instance, g.mig->compute_instance, g.mig->parent_minor,
                                                        kMigMinorsPath)
                                          : caps.error);
    } else {
      m.device = m.files.back();
      m.minor = caps.minors->ci_minor(g.mig->parent_minor, g.mig->gpu_instance, g.mig->compute_instance).value_or(-1);
    }
    out.push_back(std::move(m));
  }
  return out;
}

NodeGpu node_gpu_of(const GresGpuMapping& m) { return {m.gres_index, m.device, m.minor, m.gpu->uuid, m.gpu->mig}; }

}  // namespace

std::vector<GresGpuMapping> map_node_gpu_entries(const GresConf& conf, const std::vector<GpuIdentity>& gpus,
                                                 const std::function<int(const std::string&)>& minor_of, const MigCaps& caps) {
  if (conf.gpus.empty()) {
    if (!conf.autodetect) {
      throw CudaMpsError("gres.conf lists no Name=gpu File= entry for this node and AutoDetect is off; "
                         "add the GPU device files or set gres_conf= to the right file");
    }
    return autodetected_entries(gpus, caps);
  }
  std::vector<GresGpuMapping> out;
  for (size_t i = 0; i < conf.gpus.size(); ++i) {
    const auto& files = conf.gpus[i].files;
    const int idx = static_cast<int>(i);
    out.push_back(files.size() == 1 ? map_gpu_file(idx, files[0], gpus, minor_of) : map_mig_files(idx, files, gpus, minor_of, caps));
  }
  return out;
}

std::vector<NodeGpu> map_node_gpus(const GresConf& conf, const std::vector<GpuIdentity>& gpus,
                                   int (*minor_of)(const std::string&), const MigCaps& caps) {
  std::vector<NodeGpu> out;
  for (auto& m : map_node_gpu_entries(conf, gpus, minor_of, caps)) {
    if (!m.problem.empty()) throw CudaMpsError(m.problem);
    out.push_back(node_gpu_of(m));
  }
  return out;
}

std::vector<std::string> apply_slurm_uuids(std::vector<NodeGpu>& table, const std::vector<int>& job_gpus,
                                           const std::optional<std::string>& prolog_cvd, const std::vector<GpuIdentity>& gpus,
                                           const MigCaps& caps) {
  std::vector<std::string> notes;
  if (!prolog_cvd) return notes;
  const std::vector<std::string> entries = split_mask(*prolog_cvd);
  if (std::none_of(entries.begin(), entries.end(), [](const auto& e) { return looks_like_gpu_uuid(e); })) return notes;
  if (entries.size() != job_gpus.size()) {
    throw CudaMpsError(fmt::format("the prolog's CUDA_VISIBLE_DEVICES ({} entries) and SLURM_JOB_GPUS ({} entries) do not pair up; "
                                   "Slurm sets both from the job's GPUs: check the node's gres.conf",
                                   entries.size(), job_gpus.size()));
  }
  auto at = [&](int idx) {
    return std::find_if(table.begin(), table.end(), [&](const auto& g) { return g.gres_index == idx; });
  };
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string& e = entries[i];
    if (!looks_like_gpu_uuid(e)) continue;  // an index: the table's own mapping stands
    const int idx = job_gpus[i];
    auto mine = at(idx);
    if (mine != table.end() && canonicalize_gpu_uuid(mine->uuid) == canonicalize_gpu_uuid(e)) continue;
    auto dev = std::find_if(gpus.begin(), gpus.end(), [&](const auto& g) { return canonicalize_gpu_uuid(g.uuid) == canonicalize_gpu_uuid(e); });
    if (dev == gpus.end()) {
      throw CudaMpsError(fmt::format("Slurm gave job GPU {} (GRES index {}) as {}, which nvidia-smi does not list on this node; "
                                     "check the node's GPUs and MIG layout against what slurmd detected",
                                     i, idx, e));
    }
    GresGpuMapping m{idx, fmt::format("/dev/nvidia{}", dev->minor_number), {}, dev->minor_number, *dev, ""};
    if (dev->mig) {
      if (caps.minors) m.files = mig_device_files(*dev->mig, *caps.minors);
      if (m.files.empty()) throw CudaMpsError(fmt::format("GRES index {} is MIG device {}, whose capability files are unknown: {}", idx, e, caps.error.empty() ? "not in " + std::string(kMigMinorsPath) : caps.error));
      m.device = m.files.back();
      m.minor = caps.minors->ci_minor(dev->mig->parent_minor, dev->mig->gpu_instance, dev->mig->compute_instance).value_or(-1);
    }
    NodeGpu slurms = node_gpu_of(m);
    // Keep the table a permutation: the entry that held this device takes the one replaced.
    auto other = std::find_if(table.begin(), table.end(), [&](const auto& g) { return g.uuid == slurms.uuid; });
    notes.push_back(fmt::format("GRES index {} is {} as Slurm says (the {} order gave {})", idx, slurms.uuid,
                                "gres.conf", mine == table.end() ? std::string("nothing") : mine->uuid));
    if (mine == table.end()) {
      table.push_back(slurms);
      continue;
    }
    if (other != table.end()) {
      const int other_idx = other->gres_index;
      *other = *mine;
      other->gres_index = other_idx;
    }
    *mine = slurms;
  }
  return notes;
}

MigCaps read_mig_caps(const std::string& path) {
  MigCaps caps;
  try {
    auto [dir, file] = split_parent(path);
    Fd d(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!d) throw CudaMpsError(fmt::format("cannot open {}: {}", dir, std::strerror(errno)));
    std::optional<std::string> text = read_file_at(d.get(), file, 4 << 20);
    if (!text) throw CudaMpsError("it does not exist");
    caps.minors = MigMinors::parse(*text);
  } catch (const CudaMpsError& e) {
    caps.error = fmt::format("cannot read {} ({}); the NVIDIA driver lists the capability minors of MIG instances there "
                             "(plugin argument driver_proc=)",
                             path, e.what());
  }
  return caps;
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
