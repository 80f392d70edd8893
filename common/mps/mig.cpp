#include "common/mps/mig.hpp"

#include <cctype>
#include <charconv>

#include <fmt/format.h>

#include "common/mps/errors.hpp"
#include "common/mps/gpu.hpp"
#include "common/mps/text.hpp"

namespace unilab::mps {
namespace {

bool parse_int(std::string_view s, int& out) {
  s = trim(s);
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && out >= 0;
}

// "(UUID: X)" at the end of a -L line: X, or empty.
std::string_view uuid_in_parens(std::string_view line) {
  const size_t open = line.rfind("(UUID: ");
  if (open == std::string_view::npos || line.empty() || line.back() != ')') return {};
  return trim(line.substr(open + 7, line.size() - open - 8));
}

std::string shown(std::string_view line) { return std::string(line.substr(0, 160)); }

}  // namespace

nlohmann::json MigSlice::to_json() const {
  return {{"parent_uuid", parent_uuid},   {"parent_index", parent_index},         {"parent_minor", parent_minor},
          {"device", device},             {"profile", profile},                   {"gpu_instance", gpu_instance},
          {"compute_instance", compute_instance}};
}

MigSlice MigSlice::from_json(const nlohmann::json& j) {
  try {
    MigSlice m;
    m.parent_uuid = display_gpu_uuid(j.at("parent_uuid").get<std::string>());
    m.parent_index = j.value("parent_index", -1);
    m.parent_minor = j.value("parent_minor", -1);
    m.device = j.value("device", -1);
    m.profile = j.value("profile", "");
    m.gpu_instance = j.value("gpu_instance", -1);
    m.compute_instance = j.value("compute_instance", -1);
    return m;
  } catch (const nlohmann::json::exception& e) {
    throw CudaMpsError(fmt::format("bad MIG entry: {}", e.what()));
  }
}

std::vector<ListedGpu> parse_nvidia_smi_list(std::string_view text) {
  std::vector<ListedGpu> out;
  int line_no = 0;
  for (std::string_view raw : split_lines(text)) {
    ++line_no;
    const std::string_view line = trim(raw);
    if (line.empty()) continue;
    auto bad = [&](std::string_view why) {
      return CudaMpsError(fmt::format("nvidia-smi -L line {} {}: '{}'; check that nvidia-smi is NVIDIA's tool", line_no, why,
                                      shown(line)));
    };
    const std::string_view uuid = uuid_in_parens(line);
    if (line.starts_with("GPU ")) {
      const size_t colon = line.find(':');
      ListedGpu g;
      if (colon == std::string_view::npos || !parse_int(line.substr(4, colon - 4), g.index)) throw bad("has no GPU index");
      if (!looks_like_gpu_uuid(uuid) || has_prefix_ci(uuid, "mig-")) throw bad("has no GPU UUID");
      g.uuid = display_gpu_uuid(uuid);
      g.name = std::string(trim(line.substr(colon + 1, line.rfind("(UUID: ") - colon - 1)));
      out.push_back(std::move(g));
      continue;
    }
    if (line.starts_with("MIG ")) {
      if (out.empty()) throw bad("lists a MIG device before any GPU");
      // "MIG 1g.18gb     Device  0: (UUID: MIG-...)"
      const size_t dev = line.find(" Device ");
      const size_t colon = line.find(':', dev == std::string_view::npos ? 0 : dev);
      ListedMig m;
      if (dev == std::string_view::npos || colon == std::string_view::npos ||
          !parse_int(line.substr(dev + 8, colon - dev - 8), m.device)) {
        throw bad("has no MIG device index");
      }
      m.profile = std::string(trim(line.substr(4, dev - 4)));
      if (!has_prefix_ci(uuid, "mig-") || !looks_like_gpu_uuid(uuid)) {
        throw bad("names the MIG device without a MIG UUID of its own (drivers before R470 name it MIG-GPU-<uuid>/<gi>/<ci>; "
                  "MPS on MIG needs driver 470.42.01 or later)");
      }
      m.uuid = display_gpu_uuid(uuid);
      out.back().migs.push_back(std::move(m));
      continue;
    }
    throw bad("is neither a GPU nor a MIG device");
  }
  return out;
}

std::vector<MigTableRow> parse_mig_device_table(std::string_view table) {
  std::vector<MigTableRow> rows;
  bool in_block = false;
  for (std::string_view line : split_lines(table)) {
    if (line.find("MIG devices:") != std::string_view::npos) {
      in_block = true;
      continue;
    }
    if (!in_block) continue;
    if (line.find("Processes:") != std::string_view::npos) break;
    // "|  0    1   0   0  |   12MiB / 40192MiB | ..." : four numbers, then '|'.
    std::string_view t = trim(line);
    if (!t.starts_with('|')) continue;
    t.remove_prefix(1);
    const size_t bar = t.find('|');
    if (bar == std::string_view::npos) continue;
    const auto cells = split_nonempty(t.substr(0, bar), ' ');
    if (cells.size() != 4) continue;
    MigTableRow r;
    if (parse_int(cells[0], r.gpu) && parse_int(cells[1], r.gpu_instance) && parse_int(cells[2], r.compute_instance) &&
        parse_int(cells[3], r.device)) {
      rows.push_back(r);
    }
  }
  return rows;
}

MigMinors MigMinors::parse(std::string_view text) {
  MigMinors m;
  int line_no = 0;
  for (std::string_view raw : split_lines(text)) {
    ++line_no;
    const std::string_view line = trim(raw);
    if (line.empty()) continue;
    const auto fields = split_nonempty(line, ' ');
    int minor = -1;
    if (fields.size() != 2 || !parse_int(fields[1], minor)) {
      throw CudaMpsError(fmt::format("{} line {} is not '<capability> <minor>': '{}'", kMigMinorsPath, line_no, shown(line)));
    }
    // gpu<N>/gi<G>/access or gpu<N>/gi<G>/ci<C>/access; config, monitor and
    // whatever a later driver adds are not MIG instances.
    const auto parts = split_nonempty(fields[0], '/');
    int gpu = -1, gi = -1, ci = -1;
    auto numbered = [](std::string_view part, std::string_view prefix, int& out) {
      return part.starts_with(prefix) && parse_int(part.substr(prefix.size()), out);
    };
    if (parts.size() == 3 && numbered(parts[0], "gpu", gpu) && numbered(parts[1], "gi", gi) && parts[2] == "access") {
      m.minors_[{gpu, gi, -1}] = minor;
    } else if (parts.size() == 4 && numbered(parts[0], "gpu", gpu) && numbered(parts[1], "gi", gi) &&
               numbered(parts[2], "ci", ci) && parts[3] == "access") {
      m.minors_[{gpu, gi, ci}] = minor;
    }
  }
  return m;
}

std::optional<int> MigMinors::gi_minor(int gpu_minor, int gi) const {
  auto it = minors_.find({gpu_minor, gi, -1});
  return it == minors_.end() ? std::nullopt : std::optional<int>(it->second);
}

std::optional<int> MigMinors::ci_minor(int gpu_minor, int gi, int ci) const {
  auto it = minors_.find({gpu_minor, gi, ci});
  return it == minors_.end() ? std::nullopt : std::optional<int>(it->second);
}

std::optional<std::pair<int, int>> MigMinors::instance_of(int gpu_minor, int gi_cap, int ci_cap) const {
  for (const auto& [key, minor] : minors_) {
    const auto [gpu, gi, ci] = key;
    if (gpu == gpu_minor && ci >= 0 && minor == ci_cap && gi_minor(gpu, gi) == gi_cap) return std::pair{gi, ci};
  }
  return std::nullopt;
}

std::vector<std::string> mig_device_files(const MigSlice& mig, const MigMinors& minors) {
  const auto gi = minors.gi_minor(mig.parent_minor, mig.gpu_instance);
  const auto ci = minors.ci_minor(mig.parent_minor, mig.gpu_instance, mig.compute_instance);
  if (mig.parent_minor < 0 || !gi || !ci) return {};
  return {fmt::format("/dev/nvidia{}", mig.parent_minor), fmt::format("{}/nvidia-cap{}", kNvidiaCapsDir, *gi),
          fmt::format("{}/nvidia-cap{}", kNvidiaCapsDir, *ci)};
}

}  // namespace unilab::mps
