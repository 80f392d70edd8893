// Test double of `nvidia-smi`: the query, list and table modes that
// unilab-mps uses, fed from a GPU table file, with fault knobs (no driver,
// garbage output, latency). Formats follow the real tool; see README.md.
#include <cctype>
#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "fake_config.hpp"

namespace {

// Exit codes of the real tool.
constexpr int kExitBadArgs = 2;
constexpr int kExitNoDevices = 6;
constexpr int kExitNoDriver = 9;

constexpr const char* kNoDriverMessage =
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.";
constexpr const char* kBadArgsMessage = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.";

struct Options {
  bool help = false;
  bool list = false;
  std::optional<std::string> query;  // raw field list
  std::optional<std::string> format;
  std::optional<std::string> ids;
};

struct UsageError {
  std::string message;
};

// Accepts `--opt=value`, `--opt value` and, for -i, `-i value`.
std::optional<UsageError> parse_args(int argc, char** argv, Options& opt) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value_of = [&](const std::string& name) -> std::optional<std::string> {
      if (arg.rfind(name + "=", 0) == 0) return arg.substr(name.size() + 1);
      if (arg == name && i + 1 < argc) return std::string(argv[++i]);
      return std::nullopt;
    };
    if (arg == "-h" || arg == "--help") {
      opt.help = true;
    } else if (arg == "-L" || arg == "--list-gpus") {
      opt.list = true;
    } else if (arg.rfind("--query-gpu", 0) == 0) {
      opt.query = value_of("--query-gpu");
      if (!opt.query) return UsageError{kBadArgsMessage};
    } else if (arg.rfind("--format", 0) == 0) {
      opt.format = value_of("--format");
      if (!opt.format) return UsageError{kBadArgsMessage};
    } else if (arg == "-i" || arg.rfind("--id", 0) == 0) {
      opt.ids = arg == "-i" ? (i + 1 < argc ? std::optional<std::string>(argv[++i]) : std::nullopt) : value_of("--id");
      if (!opt.ids) return UsageError{kBadArgsMessage};
    } else {
      return UsageError{kBadArgsMessage};
    }
  }
  if (opt.list && opt.query) return UsageError{kBadArgsMessage};
  if (opt.query && !opt.format) return UsageError{"Option \"--format\" is required with \"--query-gpu\"."};
  if (opt.format && !opt.query) return UsageError{kBadArgsMessage};
  return std::nullopt;
}

struct CsvFormat {
  bool header = true;
};

std::optional<UsageError> parse_format(const std::string& spec, CsvFormat& fmt) {
  bool csv = false;
  for (const auto& part : fake::split(spec, ',')) {
    if (part == "csv") {
      csv = true;
    } else if (part == "noheader") {
      fmt.header = false;
    } else if (part == "nounits") {
      // No field we serve has units.
    } else {
      return UsageError{"\"" + part + "\" is not a valid format option."};
    }
  }
  if (!csv) return UsageError{"\"" + spec + "\" is not a valid format option."};
  return std::nullopt;
}

constexpr int kExitInfoRomWarning = 14;

// A per-GPU knob: `<key>.<index>` wins over `<key>`, else `def`.
std::string gpu_knob(const fake::Config& cfg, const std::string& key, unsigned index, const std::string& def) {
  if (auto v = cfg.get(key + "." + std::to_string(index))) return *v;
  return cfg.get(key).value_or(def);
}

// `GPU-7fdaf0a5-...` -> `GPU-7FDAF0A5-...` (the prefix keeps its case).
std::string upper_hex(const std::string& uuid) {
  std::string out = uuid;
  for (size_t i = 4; i < out.size(); ++i) out[i] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[i])));
  return out;
}

bool listed(const fake::Config& cfg, const std::string& key, const std::string& field) {
  const auto v = cfg.get(key);
  if (!v) return false;
  for (const auto& f : fake::split(*v, ',')) {
    if (f == field) return true;
  }
  return false;
}

// Field name -> value extractor; aliases as the real tool accepts them.
// Knobs: smi_compute_mode[.N], smi_mig_mode[.N], smi_upper_uuid,
// smi_na / smi_not_supported (field lists printed as [N/A] / [Not Supported]).
std::optional<std::string> field_value(const std::string& field, const fake::Gpu& g, const fake::Config* cfg = nullptr) {
  std::optional<std::string> v;
  if (field == "index") v = std::to_string(g.index);
  if (field == "uuid" || field == "gpu_uuid") v = cfg && cfg->flag("smi_upper_uuid") ? upper_hex(g.uuid) : g.uuid;
  // No "minor_number": driver 580's nvidia-smi refuses it (seen: 580.159.04);
  // the minor is in /proc/driver/nvidia/gpus/<bus>/information (fake-driver-proc).
  if (field == "pci.bus_id" || field == "gpu_bus_id") v = g.bus_id;
  if (field == "name" || field == "gpu_name") v = g.name;
  if (field == "compute_mode") v = cfg ? gpu_knob(*cfg, "smi_compute_mode", g.index, "Default") : "Default";
  if (field == "mig.mode.current") v = cfg ? gpu_knob(*cfg, "smi_mig_mode", g.index, "Disabled") : "Disabled";
  if (!v || cfg == nullptr) return v;
  if (listed(*cfg, "smi_na", field)) return "[N/A]";
  if (listed(*cfg, "smi_not_supported", field)) return "[Not Supported]";
  return v;
}

// -i takes indices, UUIDs (exact, case-insensitive) or PCI bus ids. Any id
// that names no GPU fails the whole call, like the real tool.
std::optional<std::vector<fake::Gpu>> select_gpus(const fake::GpuTable& table, const std::optional<std::string>& ids) {
  if (!ids) return table.gpus;
  std::set<unsigned> wanted;
  for (const auto& id : fake::split(*ids, ',')) {
    bool found = false;
    for (const auto& g : table.gpus) {
      if (id == std::to_string(g.index) || fake::lower(id) == fake::lower(g.uuid) || fake::lower(id) == fake::lower(g.bus_id)) {
        wanted.insert(g.index);
        found = true;
      }
    }
    if (!found) return std::nullopt;
  }
  std::vector<fake::Gpu> out;
  for (const auto& g : table.gpus) {
    if (wanted.count(g.index)) out.push_back(g);
  }
  return out;
}

// The real tool rejects an unknown field before it talks to the driver.
std::optional<UsageError> check_fields(const std::string& query) {
  for (const auto& f : fake::split(query, ',')) {
    if (f.empty() || !field_value(f, fake::Gpu{})) return UsageError{"Field \"" + f + "\" is not a valid field to query.\n"};
  }
  return std::nullopt;
}

int print_query(const std::string& query, const CsvFormat& fmt, const std::vector<fake::Gpu>& gpus, const fake::Config& cfg) {
  const auto fields = fake::split(query, ',');
  auto join = [](const std::vector<std::string>& cells) {
    std::string row;
    for (size_t i = 0; i < cells.size(); ++i) row += (i ? ", " : "") + cells[i];
    return row;
  };
  if (fmt.header) std::printf("%s\n", join(fields).c_str());
  for (const auto& g : gpus) {
    std::vector<std::string> cells;
    for (const auto& f : fields) cells.push_back(*field_value(f, g, &cfg));
    std::printf("%s\n", join(cells).c_str());
  }
  if (cfg.flag("smi_inforom_warning") && !gpus.empty()) {
    // The real tool exits 14 when an infoROM is corrupted; its rows stay valid.
    std::printf("WARNING: infoROM is corrupted at gpu %s\n", gpus.front().bus_id.c_str());
    return kExitInfoRomWarning;
  }
  return 0;
}

void print_list(const fake::GpuTable& table, const std::vector<fake::Gpu>& gpus) {
  for (const auto& g : gpus) {
    std::printf("GPU %u: %s (UUID: %s)\n", g.index, g.name.c_str(), g.uuid.c_str());
    for (const auto& m : table.migs) {
      if (m.parent == g.index) {
        std::printf("  MIG %-11s Device %2u: (UUID: %s)\n", m.profile.c_str(), m.device, m.uuid.c_str());
      }
    }
  }
}

// Human table: shape loosely follows the real one; nobody should parse it,
// except its "MIG devices:" block, whose rows are the only place nvidia-smi
// pairs a MIG device index with its GPU and compute instance ids (the
// block's shape is the MIG User Guide's).
void print_table(const fake::GpuTable& table, const std::vector<fake::Gpu>& gpus) {
  std::printf("+-----------------------------------------------------------------------------------------+\n");
  std::printf("| NVIDIA-SMI 550.54.15 (unilab fake)   Driver Version: 550.54.15      CUDA Version: 12.4  |\n");
  std::printf("|-----+--------------------------+------------------+-------+------------------------------|\n");
  std::printf("| GPU | Name                     | Bus-Id           | Minor | UUID                         |\n");
  std::printf("|=====+==========================+==================+=======+==============================|\n");
  for (const auto& g : gpus) {
    std::printf("| %3u | %-24s | %-16s | %5s | %s\n", g.index, g.name.c_str(), g.bus_id.c_str(), g.minor_number.c_str(),
                g.uuid.c_str());
  }
  std::printf("+-----------------------------------------------------------------------------------------+\n");
  bool any_mig = false;
  for (const auto& m : table.migs) {
    for (const auto& g : gpus) any_mig = any_mig || g.index == m.parent;
  }
  if (any_mig) {
    std::printf("\n+-----------------------------------------------------------------------------------------+\n");
    std::printf("| MIG devices:                                                                            |\n");
    std::printf("+------------------+----------------------------------+-----------+-----------------------+\n");
    std::printf("| GPU  GI  CI  MIG |                     Memory-Usage |        Vol|        Shared         |\n");
    std::printf("|      ID  ID  Dev |                       BAR1-Usage | SM     Unc| CE ENC  DEC  OFA  JPG |\n");
    std::printf("|                  |                                  |        ECC|                       |\n");
    std::printf("|==================+==================================+===========+=======================|\n");
    for (const auto& g : gpus) {
      for (const auto& m : table.migs) {
        if (m.parent != g.index) continue;
        std::printf("| %2u  %3u %3u %3u  |              12MiB / 19968MiB    | 16      0 |  1   0    1    0    1 |\n", m.parent,
                    m.gi, m.ci, m.device);
        std::printf("|                  |                 0MiB / 32767MiB  |           |                       |\n");
        std::printf("+------------------+----------------------------------+-----------+-----------------------+\n");
      }
    }
    std::printf("\n+-----------------------------------------------------------------------------------------+\n");
  }
  std::printf("| Processes:                                                                              |\n");
  std::printf("|  No running processes found                                                             |\n");
  std::printf("+-----------------------------------------------------------------------------------------+\n");
}

void print_usage() {
  std::printf(
      "NVIDIA System Management Interface (unilab fake)\n"
      "  nvidia-smi [-i ID[,ID]] [-L | --query-gpu=FIELDS --format=csv[,noheader][,nounits]]\n"
      "  FIELDS: index, uuid|gpu_uuid, minor_number, pci.bus_id|gpu_bus_id, name|gpu_name, compute_mode,\n"
      "          mig.mode.current\n");
}

}  // namespace

int main(int argc, char** argv) {
  const fake::Config cfg = fake::Config::load();
  fake::log_call(cfg, "nvidia-smi", argc, argv);
  fake::sleep_ms(cfg.get_ms("smi_latency_ms"));

  Options opt;
  if (const auto err = parse_args(argc, argv, opt)) {
    std::printf("%s\n", err->message.c_str());
    return kExitBadArgs;
  }
  if (opt.help) {
    print_usage();
    return 0;
  }
  CsvFormat fmt;
  if (opt.query) {
    auto err = parse_format(*opt.format, fmt);
    if (!err) err = check_fields(*opt.query);
    if (err) {
      std::printf("%s\n", err->message.c_str());
      return kExitBadArgs;
    }
  }

  if (cfg.flag("no_driver")) {
    std::printf("%s\n", kNoDriverMessage);
    return kExitNoDriver;
  }
  if (cfg.flag("garbage")) {
    // Deliberately not CSV and no ", " separators: parsers must reject it.
    std::printf("fake garbage: the driver answered something unexpected\n");
    std::printf("%%%%%%%%%%%%%%%%%%%%%%%%\n");
    std::printf("GPU ?? : ???? UUID? ::::\n");
    return 0;
  }

  std::string error;
  const auto table = fake::read_gpu_table(fake::gpu_table_path(cfg), &error);
  if (!table) {
    std::fprintf(stderr, "fake nvidia-smi: %s\n", error.c_str());
    return kExitNoDriver;
  }
  const auto gpus = select_gpus(*table, opt.ids);
  if (table->gpus.empty() || !gpus || gpus->empty()) {
    std::printf("No devices were found\n");
    return kExitNoDevices;
  }

  if (opt.query) return print_query(*opt.query, fmt, *gpus, cfg);
  if (opt.list) {
    print_list(*table, *gpus);
  } else {
    print_table(*table, *gpus);
  }
  return 0;
}
