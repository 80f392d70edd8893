#include "common/mps/gpu.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

#include <fmt/format.h>

#include "common/mps/text.hpp"

#include "common/mps/errors.hpp"
#include "common/mps/proc.hpp"

namespace unilab::mps {
namespace {

bool is_number(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

bool parse_int(std::string_view s, int& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

// The hex body (no prefix, no dashes, lowercase) and whether it is a MIG.
// Empty body when the text contains anything but hex and dashes.
std::pair<std::string, bool> uuid_body(std::string_view value) {
  value = trim(value);
  bool mig = false;
  if (has_prefix_ci(value, "gpu-")) {
    value.remove_prefix(4);
  } else if (has_prefix_ci(value, "mig-")) {
    value.remove_prefix(4);
    mig = true;
  }
  std::string body;
  for (char c : value) {
    if (c == '-') continue;
    if (!std::isxdigit(static_cast<unsigned char>(c))) return {"", mig};
    body.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return {body, mig};
}

}  // namespace

bool looks_like_gpu_uuid(std::string_view value) {
  auto [body, mig] = uuid_body(value);
  (void)mig;
  return body.size() == 32;
}

std::string canonicalize_gpu_uuid(std::string_view value) {
  auto [body, mig] = uuid_body(value);
  if (body.size() != 32) {
    throw CudaMpsError(fmt::format(
        "'{}' is not an NVIDIA GPU UUID (expected GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx; `nvidia-smi -L` lists them)",
        value));
  }
  return mig ? "mig-" + body : body;
}

std::string display_gpu_uuid(std::string_view value) {
  auto [body, mig] = uuid_body(value);
  if (body.size() != 32) return std::string(canonicalize_gpu_uuid(value));  // throws
  return fmt::format("{}-{}-{}-{}-{}-{}", mig ? "MIG" : "GPU", body.substr(0, 8), body.substr(8, 4),
                     body.substr(12, 4), body.substr(16, 4), body.substr(20));
}

nlohmann::json GpuIdentity::to_json() const {
  nlohmann::json j = {{"index", index}, {"uuid", uuid}, {"minor_number", minor_number}, {"pci_bus_id", pci_bus_id}, {"name", name}};
  if (mig) j["mig"] = mig->to_json();
  return j;
}

GpuIdentity GpuIdentity::from_json(const nlohmann::json& j) {
  GpuIdentity g;
  g.index = j.at("index").get<int>();
  g.uuid = display_gpu_uuid(j.at("uuid").get<std::string>());
  g.minor_number = j.value("minor_number", -1);
  g.pci_bus_id = j.value("pci_bus_id", "");
  g.name = j.value("name", "");
  if (j.contains("mig")) g.mig = MigSlice::from_json(j.at("mig"));
  return g;
}

std::vector<std::string> nvidia_smi_query_argv(const std::string& nvidia_smi) {
  return {nvidia_smi, std::string("--query-gpu=") + kNvidiaSmiQueryFields, "--format=csv,noheader"};
}

namespace {

// Splits one CSV row at commas, each field trimmed.
std::vector<std::string_view> csv_fields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t f = 0;
  while (true) {
    size_t comma = line.find(',', f);
    fields.push_back(trim(line.substr(f, comma == std::string_view::npos ? std::string_view::npos : comma - f)));
    if (comma == std::string_view::npos) break;
    f = comma + 1;
  }
  return fields;
}

// One row of kNvidiaSmiQueryFields; `bad` builds the error for this line.
template <typename Bad>
GpuIdentity parse_gpu_row(const std::vector<std::string_view>& fields, const Bad& bad) {
  if (fields.size() < 6) {
    throw bad("expected 6 fields: index, uuid, pci.bus_id, compute_mode, mig.mode.current, name");
  }
  GpuIdentity g;
  if (!parse_int(fields[0], g.index) || g.index < 0) throw bad("index is not a number");
  if (!looks_like_gpu_uuid(fields[1]) || has_prefix_ci(fields[1], "mig-")) throw bad("uuid is not a GPU UUID");
  g.uuid = display_gpu_uuid(fields[1]);
  // domain:bus:device.function; also what tells this query's rows from an
  // older 7-field one (minor_number third) or a shifted column.
  const std::string_view bus = fields[2];
  const size_t colon = bus.find(':'), dot = bus.rfind('.');
  if (colon == std::string_view::npos || dot == std::string_view::npos || dot < colon ||
      !std::all_of(bus.begin(), bus.end(), [](unsigned char c) { return std::isxdigit(c) || c == ':' || c == '.'; })) {
    throw bad("pci.bus_id is not a PCI bus id (domain:bus:device.function)");
  }
  g.pci_bus_id = std::string(bus);
  g.compute_mode = std::string(fields[3]);
  g.mig_mode = std::string(fields[4]);
  // A name may itself contain commas: everything after the MIG mode.
  std::string name(fields[5]);
  for (size_t i = 6; i < fields.size(); ++i) name += ", " + std::string(fields[i]);
  g.name = name;
  return g;
}

}  // namespace

std::vector<GpuIdentity> parse_nvidia_smi_query(std::string_view csv) {
  std::vector<GpuIdentity> gpus;
  int line_no = 0;
  for (std::string_view raw : split_lines(csv)) {
    std::string_view line = trim(raw);
    ++line_no;
    if (line.empty()) continue;
    auto bad = [&](std::string_view why) {
      return CudaMpsError(fmt::format(
          "nvidia-smi output line {} is not a GPU row ({}): '{}'; check that nvidia-smi is NVIDIA's tool and the driver works",
          line_no, why, line.substr(0, 120)));
    };
    GpuIdentity g = parse_gpu_row(csv_fields(line), bad);
    for (const auto& other : gpus) {
      if (other.index == g.index || other.uuid == g.uuid) throw bad("duplicate GPU index or UUID");
    }
    gpus.push_back(std::move(g));
  }
  std::sort(gpus.begin(), gpus.end(), [](const auto& a, const auto& b) { return a.index < b.index; });
  return gpus;
}

namespace {

// nvidia-smi's own warning lines ("WARNING: infoROM is corrupted at gpu
// 0000:17:00.0"), which it may print among the rows when it exits 14.
std::string without_warning_lines(std::string_view out, std::string& first_warning) {
  std::string kept;
  for (std::string_view line : split_lines(out)) {
    if (has_prefix_ci(trim(line), "warning")) {
      if (first_warning.empty()) first_warning = std::string(trim(line));
      continue;
    }
    kept.append(line).push_back('\n');
  }
  return kept;
}

}  // namespace

DriverGpuInformation parse_driver_gpu_information(std::string_view text) {
  DriverGpuInformation info;
  for (std::string_view line : split_lines(text)) {
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view key = trim(line.substr(0, colon)), value = trim(line.substr(colon + 1));
    int n = -1;
    if (key == "GPU UUID" && looks_like_gpu_uuid(value) && !has_prefix_ci(value, "mig-")) info.uuid = display_gpu_uuid(value);
    if (key == "Device Minor" && parse_int(value, n) && n >= 0) info.minor = n;
  }
  return info;
}

std::string driver_bus_directory(std::string_view pci_bus_id) {
  std::string_view b = trim(pci_bus_id);
  // nvidia-smi prints an 8-digit domain (00000000:2A:00.0); the kernel's
  // PCI names, which the driver's directories use, have 4 (0000:2a:00.0).
  const size_t colon = b.find(':');
  if (colon == 8 && b.substr(0, 4) == "0000") b.remove_prefix(4);
  return lower(b);
}

std::optional<std::string> read_driver_file(const std::string& path) { return read_proc_file(path, 64 << 10); }

void read_driver_minors(std::vector<GpuIdentity>& gpus, const std::string& driver_proc, const DriverFileReader& read) {
  for (auto& g : gpus) {
    if (g.mig || g.pci_bus_id.empty()) continue;
    const std::string bus = driver_bus_directory(g.pci_bus_id);
    if (bus.find('/') != std::string::npos || bus.starts_with('.')) continue;  // not a bus id: never a path
    auto text = read(fmt::format("{}/nvidia/gpus/{}/information", driver_proc, bus));
    if (!text) continue;
    const DriverGpuInformation info = parse_driver_gpu_information(*text);
    if (info.minor && (!info.uuid || *info.uuid == g.uuid)) g.minor_number = *info.minor;
  }
}

GpuDiscovery query_gpus(CommandRunner& runner, const Tools& tools, const DriverFileReader& read) {
  const std::string& nvidia_smi = tools.nvidia_smi;
  const std::optional<std::string>& driver_dir = tools.driver_dir;
  Command cmd;
  cmd.argv = nvidia_smi_query_argv(nvidia_smi);
  cmd.env = tool_environment("/usr/bin:/bin", driver_dir);
  cmd.timeout = kNvidiaSmiTimeout;
  CommandResult r = runner.run(cmd);
  if (!r.exec_error.empty()) {
    throw CudaMpsError(fmt::format("{}; install the NVIDIA driver utilities or set the nvidia-smi path or the driver "
                                   "directory (nvidia_smi=/driver_dir= or --nvidia-smi/--driver-dir)",
                                   r.exec_error));
  }
  const bool inforom = r.exec_error.empty() && !r.timed_out && r.term_signal == 0 && r.exit_code == kNvidiaSmiInfoRomWarning;
  if (!r.ok() && !inforom) {
    std::string line = r.first_output_line();
    throw CudaMpsError(fmt::format("{} failed ({}){}{}; check the NVIDIA driver on this host", nvidia_smi, r.describe(),
                                   line.empty() ? "" : ": ", line));
  }
  GpuDiscovery d;
  std::string warning;
  d.gpus = parse_nvidia_smi_query(inforom ? without_warning_lines(r.out, warning) : r.out);
  if (d.gpus.empty()) throw CudaMpsError(fmt::format("{} reports no GPU on this host", nvidia_smi));
  read_driver_minors(d.gpus, tools.driver_proc, read);
  // MIG devices are GPUs too (their parents stay listed, with MIG enabled).
  std::vector<GpuIdentity> migs = query_mig_devices(runner, tools, d.gpus);
  d.gpus.insert(d.gpus.end(), migs.begin(), migs.end());
  if (inforom) {
    if (warning.empty()) warning = r.first_output_line();
    d.warning = fmt::format("{} exited {} (infoROM warning{}{}) but its GPU rows are valid; the GPU's infoROM may need "
                            "attention from NVIDIA support",
                            nvidia_smi, kNvidiaSmiInfoRomWarning, warning.empty() ? "" : ": ", warning);
  }
  return d;
}

bool mig_enabled(const GpuIdentity& gpu) { return !gpu.mig && gpu.mig_mode == "Enabled"; }

std::vector<GpuIdentity> mig_devices_from(const std::vector<GpuIdentity>& gpus, std::string_view list_output,
                                          std::string_view table_output) {
  const std::vector<MigTableRow> rows = parse_mig_device_table(table_output);
  std::vector<GpuIdentity> out;
  for (const ListedGpu& listed : parse_nvidia_smi_list(list_output)) {
    auto parent = std::find_if(gpus.begin(), gpus.end(), [&](const auto& g) { return !g.mig && g.uuid == listed.uuid; });
    if (parent == gpus.end()) {
      throw CudaMpsError(fmt::format("nvidia-smi -L lists GPU {} ({}), which its query did not report; check the NVIDIA driver",
                                     listed.index, listed.uuid));
    }
    for (const ListedMig& m : listed.migs) {
      GpuIdentity g;
      g.uuid = m.uuid;
      g.minor_number = parent->minor_number;
      g.pci_bus_id = parent->pci_bus_id;
      g.name = fmt::format("{} MIG {}", parent->name, m.profile);
      MigSlice slice{parent->uuid, parent->index, parent->minor_number, m.device, m.profile};
      for (const auto& r : rows) {
        if (r.gpu == parent->index && r.device == m.device) {
          slice.gpu_instance = r.gpu_instance;
          slice.compute_instance = r.compute_instance;
        }
      }
      g.mig = slice;
      out.push_back(std::move(g));
    }
  }
  return out;
}

std::vector<GpuIdentity> query_mig_devices(CommandRunner& runner, const Tools& tools, const std::vector<GpuIdentity>& gpus) {
  if (std::none_of(gpus.begin(), gpus.end(), mig_enabled)) return {};
  const std::string& nvidia_smi = tools.nvidia_smi;
  const std::optional<std::string>& driver_dir = tools.driver_dir;
  auto run = [&](std::vector<std::string> argv) {
    Command cmd;
    cmd.argv = std::move(argv);
    cmd.env = tool_environment("/usr/bin:/bin", driver_dir);
    cmd.timeout = kNvidiaSmiTimeout;
    CommandResult r = runner.run(cmd);
    if (!r.exec_error.empty() || !r.ok()) {
      std::string line = r.exec_error.empty() ? r.first_output_line() : r.exec_error;
      throw CudaMpsError(fmt::format("{} failed ({}){}{}; check the NVIDIA driver on this host", join(cmd.argv, " "), r.describe(),
                                     line.empty() ? "" : ": ", line));
    }
    return r.out;
  };
  const std::string list = run({nvidia_smi, "-L"});
  const std::string table = run({nvidia_smi});
  return mig_devices_from(gpus, list, table);
}

std::vector<GpuIdentity> discover_gpus(CommandRunner& runner, const Tools& tools) { return query_gpus(runner, tools).gpus; }

std::vector<std::string> split_mask(std::string_view mask) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= mask.size()) {
    size_t comma = mask.find(',', pos);
    if (comma == std::string_view::npos) comma = mask.size();
    std::string_view e = trim(mask.substr(pos, comma - pos));
    if (!e.empty()) out.emplace_back(e);
    pos = comma + 1;
  }
  return out;
}

const GpuIdentity& find_gpu(std::string_view entry, const std::vector<GpuIdentity>& gpus) {
  entry = trim(entry);
  if (is_number(entry)) {
    int idx = -1;
    if (parse_int(entry, idx)) {
      for (const auto& g : gpus) if (g.index == idx) return g;
    }
    throw CudaMpsError(fmt::format("GPU index {} does not exist on this host (nvidia-smi lists {} GPU{}); use an index from `nvidia-smi -L`",
                                   entry, gpus.size(), gpus.size() == 1 ? "" : "s"));
  }
  auto [body, mig] = uuid_body(entry);
  if (mig) {
    if (body.size() != 32) {
      throw CudaMpsError(fmt::format("'{}' is not a whole MIG UUID; give all of it (`nvidia-smi -L` lists them)", entry));
    }
    for (const auto& g : gpus) {
      if (g.mig && canonicalize_gpu_uuid(g.uuid) == "mig-" + body) return g;
    }
    throw CudaMpsError(fmt::format("no MIG device with UUID '{}' on this host; `nvidia-smi -L` lists them under their GPUs", entry));
  }
  if (body.empty()) {
    throw CudaMpsError(fmt::format("'{}' is neither a GPU index nor a GPU UUID; use `nvidia-smi -L` to list them", entry));
  }
  const GpuIdentity* match = nullptr;
  for (const auto& g : gpus) {
    if (g.mig) continue;
    std::string token = canonicalize_gpu_uuid(g.uuid);
    if (token.compare(0, body.size(), body) == 0) {
      if (match != nullptr && body.size() < 32) {
        throw CudaMpsError(fmt::format("GPU UUID prefix '{}' is ambiguous (matches {} and {}); give more characters", entry,
                                       match->uuid, g.uuid));
      }
      match = &g;
    }
  }
  if (match == nullptr) {
    throw CudaMpsError(fmt::format("no GPU with UUID '{}' on this host; use `nvidia-smi -L` to list them", entry));
  }
  return *match;
}

std::vector<GpuIdentity> visible_gpus(const std::optional<std::string>& mask, const std::vector<GpuIdentity>& gpus) {
  if (!mask) {
    // CUDA enumerates a MIG-enabled GPU's MIG devices, never the GPU itself.
    std::vector<GpuIdentity> all;
    std::copy_if(gpus.begin(), gpus.end(), std::back_inserter(all), [](const auto& g) { return !mig_enabled(g); });
    return all;
  }
  std::vector<GpuIdentity> out;
  for (const auto& entry : split_mask(*mask)) {
    if (entry == "-1") break;  // CUDA stops enumerating at the first invalid entry
    const GpuIdentity& g = find_gpu(entry, gpus);
    if (std::any_of(out.begin(), out.end(), [&](const auto& o) { return o.uuid == g.uuid; })) {
      throw CudaMpsError(fmt::format("CUDA_VISIBLE_DEVICES names GPU {} twice ('{}'); list each GPU once", g.uuid, entry));
    }
    out.push_back(g);
  }
  return out;
}

std::vector<std::string> resolve_mps_visibility_entries(const std::vector<std::string>& entries,
                                                        const std::vector<GpuIdentity>& gpus) {
  std::vector<std::string> out;
  for (const auto& raw : entries) {
    std::string_view e = trim(raw);
    if (is_number(e)) {
      int idx = -1;
      const GpuIdentity* hit = nullptr;
      if (parse_int(e, idx)) {
        for (const auto& g : gpus) if (g.index == idx) hit = &g;
      }
      if (hit == nullptr) {
        throw CudaMpsError(fmt::format(
            "CUDA_VISIBLE_DEVICES entry {} names no GPU on this host ({} GPU{} found); fix the mask or use GPU UUIDs",
            e, gpus.size(), gpus.size() == 1 ? "" : "s"));
      }
      out.push_back(hit->uuid);
    } else {
      out.emplace_back(e);  // UUID, MIG-..., -1: unchanged
    }
  }
  return out;
}

std::vector<std::string> resolve_mps_visibility_entries(const std::vector<std::string>& entries,
                                                        CommandRunner& runner, const std::string& nvidia_smi) {
  bool needs = std::any_of(entries.begin(), entries.end(), [](const auto& e) { return is_number(trim(e)); });
  if (!needs) return resolve_mps_visibility_entries(entries, std::vector<GpuIdentity>{});
  Tools tools;
  tools.nvidia_smi = nvidia_smi;
  return resolve_mps_visibility_entries(entries, discover_gpus(runner, tools));
}

}  // namespace unilab::mps
