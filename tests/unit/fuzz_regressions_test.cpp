// Inputs the libFuzzer targets in tests/fuzz/ found (scripts/fuzz), kept as
// regression tests: each must now end in a clean CudaMpsError (or a value),
// quickly and in bounded memory.
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/mps/errors.hpp"
#include "common/slurm/gres.hpp"
#include "common/mps/record.hpp"

namespace unilab::mps {
namespace {

// What tests/fuzz/fuzz_gres.cpp does with one input: "<node>\n<gres.conf>".
void gres_target(std::string_view input) {
  size_t nl = input.find('\n');
  std::string node(input.substr(0, nl == std::string_view::npos ? input.size() : nl));
  std::string_view rest = nl == std::string_view::npos ? std::string_view() : input.substr(nl + 1);
  try {
    (void)parse_gres_conf(rest, node);
  } catch (const CudaMpsError&) {
  }
  try {
    (void)expand_hostlist(node);
  } catch (const CudaMpsError&) {
  }
  try {
    (void)parse_gpu_index_list(node);
  } catch (const CudaMpsError&) {
  }
}

// fuzz_gres oom-6ce03394355b059fbbff278808c92900ff33fa38: two ranges whose
// product is ~9e7 names made expand_hostlist allocate past 2 GiB.
TEST(FuzzRegressions, GresHostlistRangeProductIsBounded) {
  static const unsigned char kInput[] = {
      0x49, 0x5d, 0x5d, 0x5d, 0x5d, 0x09, 0xa7, 0x49, 0xd3, 0x73, 0x55, 0x00, 0x00, 0x5d, 0x5d, 0x5d, 0x5d, 0x5d, 0x5d,
      0x5d, 0x5d, 0x5d, 0x5d, 0x5d, 0x5b, 0x33, 0x33, 0x1c, 0x1c, 0x1c, 0x1c, 0x1c, 0x1c, 0x1c, 0x1c, 0x1c, 0x1c, 0x1c,
      0x1c, 0x1c, 0x1c, 0x1c, 0x1c, 0x1c, 0x1c, 0x1c, 0x1c, 0x1c, 0x1c, 0x1c, 0x1c, 0x1c, 0x1c, 0x1c, 0x1c, 0x1c, 0x1c,
      0x1c, 0x1c, 0x1c, 0x1c, 0x1c, 0x1c, 0x1c, 0x1c, 0x1c, 0x62, 0x5d, 0x5d, 0x5d, 0x5d, 0x5d, 0x5d, 0x5d, 0x5d, 0x5b,
      0x31, 0x35, 0x2d, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30,
      0x30, 0x33, 0x30, 0x33, 0x33, 0x5d, 0x5d, 0x5b, 0x31, 0x35, 0x2d, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30,
      0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x33, 0x30, 0x33, 0x33, 0x33, 0x0a, 0x35, 0x33, 0x01, 0x33,
      0x33, 0x30, 0x20, 0x33};
  gres_target(std::string_view(reinterpret_cast<const char*>(kInput), sizeof kInput));
  EXPECT_THROW(expand_hostlist("n[15-3033][15-30333]"), CudaMpsError);
  EXPECT_THROW(expand_hostlist("n[0-99999][0-99999]"), CudaMpsError);
  EXPECT_THROW(parse_gres_conf("NodeName=gpu[0-9999][0-9999] Name=gpu File=/dev/nvidia0\n", "n1"), CudaMpsError);
  // Up to the bound, hostlists still expand.
  EXPECT_EQ(expand_hostlist("n[0-255][0-255]").size(), 65536u);
  EXPECT_THROW(expand_hostlist("n[0-255][0-255],x"), CudaMpsError);
  EXPECT_EQ(expand_hostlist("n[01-03],m").size(), 4u);
}

// fuzz_record (seeded probe of the target): a number that does not fit the
// field's integer type. `"pid": 1e300` was cast float -> int (undefined
// behaviour, UBSan: "1e+300 is outside the range of representable values of
// type 'int'"); `"uid": -1` silently became uid 4294967295.
TEST(FuzzRegressions, RecordIntegersMustFitTheirType) {
  const nlohmann::json good = {
      {"schema_version", 1}, {"name", "job42.n1.gpu0"}, {"uid", 1001}, {"gid", 1001}, {"host", "n1"},
      {"topology_mode", "single_gpu"}, {"gpu_uuids", {"GPU-a1b2c3d4-e5f6-4718-9a0b-1c2d3e4f5a6b"}},
      {"pipe_directory", "/run/x/pipe"}, {"log_directory", "/run/x/log"}, {"pid", 4242},
      {"process_start_ticks", 987654}, {"created_at", 1.7e9}, {"boot_id", "b"}, {"state", "running"},
      {"job_id", "42"}, {"owned_directories", nlohmann::json::array()},
      {"slurm", {{"job_id", "42"}, {"node", "n1"}, {"mode", "auto"}, {"gres_indices", {0}},
                 {"node_gpus", {{{"gres_index", 0}, {"device", "/dev/nvidia3"}, {"minor", 3},
                                 {"uuid", "GPU-a1b2c3d4-e5f6-4718-9a0b-1c2d3e4f5a6b"}}}}}}};
  EXPECT_EQ(DaemonRecord::from_json(good).pid, 4242);
  auto with = [&](const nlohmann::json::json_pointer& at, const nlohmann::json& v) {
    nlohmann::json j = good;
    j[at] = v;
    return j;
  };
  using P = nlohmann::json::json_pointer;
  EXPECT_THROW(DaemonRecord::from_json(with(P("/pid"), 1e300)), CudaMpsError);
  EXPECT_THROW(DaemonRecord::from_json(with(P("/pid"), 4242.5)), CudaMpsError);
  EXPECT_THROW(DaemonRecord::from_json(with(P("/pid"), 4294967296LL)), CudaMpsError);
  EXPECT_THROW(DaemonRecord::from_json(with(P("/uid"), -1)), CudaMpsError);
  EXPECT_THROW(DaemonRecord::from_json(with(P("/gid"), -1)), CudaMpsError);
  EXPECT_THROW(DaemonRecord::from_json(with(P("/process_start_ticks"), -5)), CudaMpsError);
  EXPECT_THROW(DaemonRecord::from_json(with(P("/schema_version"), 1.0e19)), CudaMpsError);
  EXPECT_THROW(DaemonRecord::from_json(with(P("/slurm/gres_indices"), nlohmann::json::array({1e300}))), CudaMpsError);
  EXPECT_THROW(DaemonRecord::from_json(with(P("/slurm/node_gpus/0/minor"), -1e300)), CudaMpsError);
  EXPECT_THROW(DaemonRecord::from_json(with(P("/pid"), true)), CudaMpsError);
  EXPECT_EQ(DaemonRecord::from_json(with(P("/process_start_ticks"), 18446744073709551615ULL)).process_start_ticks,
            18446744073709551615ULL);
}

}  // namespace
}  // namespace unilab::mps
