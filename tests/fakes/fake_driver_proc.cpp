// Test double of what the NVIDIA kernel module shows under /proc/driver,
// written as files from the same GPU table the fake nvidia-smi reads, so
// both views of the fake driver agree:
//   DIR/nvidia/gpus/<bus>/information   one per GPU, the real file's lines
//                                       (GPU UUID, Bus Location, Device Minor)
//   DIR/nvidia-caps/mig-minors          the capability minors of every GPU
//                                       and MIG instance, numbered as the real
//                                       driver numbers them
// Usage: fake-driver-proc DIR   (the table: UNILAB_FAKE_GPU_TABLE, gpu_table=
// in fake.conf, else gpus.csv next to this program)
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "fake_config.hpp"

namespace {

bool make_dirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i != path.size() && path[i] != '/') continue;
    const std::string prefix = path.substr(0, i);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  return true;
}

// "00000000:2A:00.0" -> "0000:2a:00.0", as the kernel names PCI devices.
std::string kernel_bus(const std::string& bus) {
  std::string b = bus;
  if (b.size() > 8 && b[8] == ':' && b.compare(0, 4, "0000") == 0) b.erase(0, 4);
  return fake::lower(b);
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || argv[1][0] != '/') {
    std::fprintf(stderr, "usage: fake-driver-proc ABSOLUTE_DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  const fake::Config cfg = fake::Config::load();
  std::string error;
  const auto table = fake::read_gpu_table(fake::gpu_table_path(cfg), &error);
  if (!table) {
    std::fprintf(stderr, "fake-driver-proc: %s\n", error.c_str());
    return 1;
  }
  for (const auto& g : table->gpus) {
    const std::string gdir = dir + "/nvidia/gpus/" + kernel_bus(g.bus_id);
    // The real file (driver 580.159.04 on an H200), tab-padded.
    const std::string info = "Model: \t\t " + g.name + "\nIRQ:   \t\t 41\nGPU UUID: \t " + g.uuid +
                             "\nVideo BIOS: \t 96.00.a5.00.1a\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t "
                             "0xfffffffffffff\nBus Location: \t " + kernel_bus(g.bus_id) + "\nDevice Minor: \t " +
                             g.minor_number + "\nGPU Firmware: \t 580.159.04\nGPU Excluded:\t No\n";
    if (!make_dirs(gdir) || !write_file(gdir + "/information", info)) {
      std::fprintf(stderr, "fake-driver-proc: cannot write %s: %s\n", gdir.c_str(), std::strerror(errno));
      return 1;
    }
  }
  // config 1, monitor 2, then per GPU minor 0..31, per GPU instance 0..14:
  // the instance's access minor and its 8 compute instances' (the driver's
  // fixed numbering: gpu31/gi14/ci7/access is 4322).
  std::string minors = "config 1\nmonitor 2\n";
  for (unsigned gpu = 0; gpu < 32; ++gpu) {
    for (unsigned gi = 0; gi < 15; ++gi) {
      const unsigned base = 3 + gpu * 135 + gi * 9;
      minors += "gpu" + std::to_string(gpu) + "/gi" + std::to_string(gi) + "/access " + std::to_string(base) + "\n";
      for (unsigned ci = 0; ci < 8; ++ci) {
        minors += "gpu" + std::to_string(gpu) + "/gi" + std::to_string(gi) + "/ci" + std::to_string(ci) + "/access " +
                  std::to_string(base + 1 + ci) + "\n";
      }
    }
  }
  if (!make_dirs(dir + "/nvidia-caps") || !write_file(dir + "/nvidia-caps/mig-minors", minors)) {
    std::fprintf(stderr, "fake-driver-proc: cannot write %s/nvidia-caps: %s\n", dir.c_str(), std::strerror(errno));
    return 1;
  }
  return 0;
}
