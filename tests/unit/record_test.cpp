#include "common/mps/record.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

#include "common/mps/errors.hpp"
#include "common/mps/topology.hpp"
#include "tests/unit/doubles.hpp"

namespace unilab::mps {
namespace {

using test::error_of;
using test::make_record;
using test::TempDir;

DaemonRecord plain_record() {
  DaemonRecord r = make_record("gpu-7fdaf0a5", 1000, "ws1", 4242, 123456, "/tmp/u/gpu-7fdaf0a5/pipe", {test::kUuid0});
  r.owned_directories = {"/tmp/u/gpu-7fdaf0a5"};
  return r;
}

DaemonRecord slurm_record() {
  DaemonRecord r = make_record("job17.n1.multi", 1000, "n1", 99, 5, "/run/unilab-mps/run/job17.n1.multi/pipe",
                               {test::kUuid1, test::kUuid2});
  r.job_id = "17";
  r.limits.active_thread_percentage = 37.5;
  r.limits.pinned_mem_limit = "8192M";
  r.slurm = SlurmBinding{"17", "n1", JobMode::kMulti, {0, 1},
                         {NodeGpu{0, "/dev/nvidia3", 3, test::kUuid1, std::nullopt}, NodeGpu{1, "/dev/nvidia1", 1, test::kUuid2, std::nullopt}}};
  r.owned_directories = {"/run/unilab-mps/run/job17.n1.multi"};
  return r;
}

// --- JSON ---------------------------------------------------------------------

TEST(DaemonRecordJson, RoundTripWithoutSlurmOrLimits) {
  DaemonRecord r = plain_record();
  nlohmann::json j = r.to_json();
  EXPECT_EQ(j["schema_version"], 1);
  EXPECT_TRUE(j["slurm"].is_null());
  EXPECT_TRUE(j["job_id"].is_null());
  EXPECT_EQ(DaemonRecord::from_json(j), r);
  // Through text, as on disk.
  EXPECT_EQ(DaemonRecord::from_json(nlohmann::json::parse(j.dump(2))), r);
}

TEST(DaemonRecordJson, RoundTripWithSlurmBindingAndLimits) {
  DaemonRecord r = slurm_record();
  nlohmann::json j = r.to_json();
  EXPECT_EQ(j["slurm"]["node_gpus"][0]["device"], "/dev/nvidia3");
  EXPECT_EQ(j["limits"]["pinned_mem_limit"], "8192M");
  DaemonRecord back = DaemonRecord::from_json(nlohmann::json::parse(j.dump()));
  EXPECT_EQ(back, r);
  ASSERT_TRUE(back.slurm);
  EXPECT_EQ(back.slurm->node_gpus[1].minor, 1);
  EXPECT_EQ(back.limits.active_thread_percentage, 37.5);
}

TEST(DaemonRecordJson, ClientPriorityIsWrittenOnlyWhenGivenAndReadBack) {
  DaemonRecord r = slurm_record();
  EXPECT_FALSE(r.to_json()["limits"].contains("client_priority"));  // older records' bytes unchanged
  r.limits.client_priority = ClientPriority::kBelowNormal;
  nlohmann::json j = r.to_json();
  EXPECT_EQ(j["limits"]["client_priority"], "below-normal");
  EXPECT_EQ(DaemonRecord::from_json(nlohmann::json::parse(j.dump())), r);
  j["limits"]["client_priority"] = "high";
  std::string e = error_of([&] { DaemonRecord::from_json(j); });
  EXPECT_NE(e.find("client_priority 'high'"), std::string::npos) << e;
}

TEST(DaemonRecordJson, AutoThreadShareIsWrittenOnlyWhenGiven) {
  DaemonRecord r = slurm_record();
  EXPECT_FALSE(r.to_json()["limits"].contains("active_thread_share"));
  r.limits.active_thread_share_auto = true;
  nlohmann::json j = r.to_json();
  EXPECT_EQ(j["limits"]["active_thread_share"], "auto");
  EXPECT_EQ(DaemonRecord::from_json(nlohmann::json::parse(j.dump())), r);
  j["limits"]["active_thread_share"] = "even";
  EXPECT_THROW(DaemonRecord::from_json(j), CudaMpsError);
}

TEST(DaemonRecordJson, StartingRecordWithPidZeroRoundTrips) {
  DaemonRecord r = plain_record();
  r.state = RecordState::kStarting;
  r.pid = 0;
  r.process_start_ticks = 0;
  EXPECT_EQ(DaemonRecord::from_json(r.to_json()), r);
}

TEST(DaemonRecordJson, UuidsAreNormalizedToDisplayForm) {
  nlohmann::json j = plain_record().to_json();
  j["gpu_uuids"] = {"7FDAF0A5179BF636D15DDAF243E3FF16"};
  EXPECT_EQ(DaemonRecord::from_json(j).gpu_uuids, (std::vector<std::string>{test::kUuid0}));
}

TEST(DaemonRecordJson, EveryMissingFieldIsAnErrorNamingIt) {
  const nlohmann::json full = plain_record().to_json();
  for (const char* key : {"schema_version", "name", "uid", "gid", "host", "topology_mode", "gpu_uuids", "pipe_directory",
                          "log_directory", "pid", "process_start_ticks", "created_at", "boot_id", "state",
                          "owned_directories"}) {
    nlohmann::json j = full;
    j.erase(key);
    std::string e = error_of([&] { DaemonRecord::from_json(j); });
    EXPECT_NE(e.find(std::string("'") + key + "'"), std::string::npos) << key << ": " << e;
  }
  // Optional ones may be absent.
  nlohmann::json j = full;
  j.erase("job_id");
  j.erase("limits");
  j.erase("slurm");
  EXPECT_EQ(DaemonRecord::from_json(j), plain_record());
}

TEST(DaemonRecordJson, MissingSlurmFieldsAreNamed) {
  const nlohmann::json full = slurm_record().to_json();
  for (const char* key : {"job_id", "node", "mode", "gres_indices", "node_gpus"}) {
    nlohmann::json j = full;
    j["slurm"].erase(key);
    std::string e = error_of([&] { DaemonRecord::from_json(j); });
    EXPECT_NE(e.find(std::string("'") + key + "'"), std::string::npos) << key << ": " << e;
  }
  nlohmann::json j = full;
  j["slurm"]["node_gpus"][0].erase("minor");
  EXPECT_NE(error_of([&] { DaemonRecord::from_json(j); }).find("'minor'"), std::string::npos);
}

TEST(DaemonRecordJson, WrongTypesAreErrorsNamingTheField) {
  nlohmann::json j = plain_record().to_json();
  j["pid"] = "4242";
  EXPECT_NE(error_of([&] { DaemonRecord::from_json(j); }).find("'pid'"), std::string::npos);
  j = plain_record().to_json();
  j["gpu_uuids"] = "GPU-x";
  EXPECT_NE(error_of([&] { DaemonRecord::from_json(j); }).find("'gpu_uuids'"), std::string::npos);
  EXPECT_THROW(DaemonRecord::from_json(nlohmann::json::array()), CudaMpsError);
  EXPECT_THROW(DaemonRecord::from_json(nlohmann::json("text")), CudaMpsError);
}

TEST(DaemonRecordJson, OtherSchemaVersionIsRefused) {
  nlohmann::json j = plain_record().to_json();
  j["schema_version"] = 2;
  std::string e = error_of([&] { DaemonRecord::from_json(j); });
  EXPECT_NE(e.find("schema version 2"), std::string::npos) << e;
}

TEST(DaemonRecordJson, BadValuesAreRefused) {
  auto refuses = [](const char* key, nlohmann::json value) {
    nlohmann::json j = plain_record().to_json();
    j[key] = std::move(value);
    return error_of([&] { DaemonRecord::from_json(j); });
  };
  EXPECT_NE(refuses("topology_mode", "mesh").find("mesh"), std::string::npos);
  EXPECT_NE(refuses("pipe_directory", "relative/pipe").find("absolute"), std::string::npos);
  EXPECT_NE(refuses("log_directory", "").find("absolute"), std::string::npos);
  EXPECT_NE(refuses("state", "zombie").find("zombie"), std::string::npos);
  EXPECT_NE(refuses("name", "../etc/passwd").find("'name'"), std::string::npos);
  EXPECT_NE(refuses("gpu_uuids", nlohmann::json::array()).find("'gpu_uuids'"), std::string::npos);
  EXPECT_NE(refuses("gpu_uuids", nlohmann::json::array({"0"})).find("not an NVIDIA GPU UUID"), std::string::npos);
  EXPECT_NE(refuses("pid", 0).find("pid"), std::string::npos);  // running needs a pid
  EXPECT_NE(refuses("owned_directories", nlohmann::json::array({"/tmp/u/../../etc"})).find("owned_directories"),
            std::string::npos);
  EXPECT_NE(refuses("owned_directories", nlohmann::json::array({"rel"})).find("owned_directories"), std::string::npos);
  nlohmann::json j = plain_record().to_json();
  j["state"] = "starting";
  j["pid"] = -3;
  EXPECT_THROW(DaemonRecord::from_json(j), CudaMpsError);
}

// --- containment ------------------------------------------------------------------

ContainmentPlan v1_containment() {
  ContainmentPlan c;
  c.cgroup_version = 1;
  c.mountpoint = "/sys/fs/cgroup";
  c.controllers = {"freezer", "devices", "memory"};
  c.job_cgroup = "uid_1000/job_17/step_extern";
  return c;
}

// plain_record() as DaemonRecord::to_json().dump(2) wrote it before records
// could hold a containment plan (commit 21c6754): records without one must
// stay byte-identical, so older readers and diffs of state dirs see no change.
const char* const kPlainRecordBeforeContainment = R"({
  "boot_id": "0c1e3a55-boot-0000-0000-000000000001",
  "created_at": 1700000000.0,
  "gid": 1000,
  "gpu_uuids": [
    "GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16"
  ],
  "host": "ws1",
  "job_id": null,
  "limits": {
    "active_thread_percentage": null,
    "pinned_mem_limit": null
  },
  "log_directory": "/tmp/u/gpu-7fdaf0a5/pipe-log",
  "name": "gpu-7fdaf0a5",
  "owned_directories": [
    "/tmp/u/gpu-7fdaf0a5"
  ],
  "pid": 4242,
  "pipe_directory": "/tmp/u/gpu-7fdaf0a5/pipe",
  "process_start_ticks": 123456,
  "schema_version": 1,
  "slurm": null,
  "state": "running",
  "topology_mode": "single_gpu",
  "uid": 1000
})";

TEST(DaemonRecordJson, ContainmentRoundTrips) {
  DaemonRecord r = slurm_record();
  r.containment = v1_containment();
  nlohmann::json j = r.to_json();
  ASSERT_TRUE(j.contains("containment"));
  EXPECT_EQ(j["containment"]["cgroup_version"], 1);
  EXPECT_EQ(j["containment"]["job_cgroup"], "uid_1000/job_17/step_extern");
  EXPECT_EQ(j["containment"]["controllers"], nlohmann::json::array({"freezer", "devices", "memory"}));
  DaemonRecord back = DaemonRecord::from_json(nlohmann::json::parse(j.dump(2)));
  EXPECT_EQ(back, r);
  ASSERT_TRUE(back.containment);
  EXPECT_EQ(*back.containment, v1_containment());

  ContainmentPlan v2;
  v2.cgroup_version = 2;
  v2.mountpoint = "/sys/fs/cgroup";
  v2.job_cgroup = "job_17/step_extern";
  r.containment = v2;
  back = DaemonRecord::from_json(nlohmann::json::parse(r.to_json().dump()));
  EXPECT_EQ(back, r);
  EXPECT_TRUE(back.containment->controllers.empty());
}

TEST(DaemonRecordJson, WithoutContainmentTheJsonIsAsBefore) {
  DaemonRecord r = plain_record();
  ASSERT_FALSE(r.containment);
  nlohmann::json j = r.to_json();
  EXPECT_FALSE(j.contains("containment"));
  EXPECT_EQ(j.dump(2), kPlainRecordBeforeContainment);
  // And such a record still reads, without containment; so does an explicit null.
  DaemonRecord back = DaemonRecord::from_json(nlohmann::json::parse(kPlainRecordBeforeContainment));
  EXPECT_EQ(back, r);
  EXPECT_FALSE(back.containment);
  j["containment"] = nullptr;
  EXPECT_FALSE(DaemonRecord::from_json(j).containment);
}

TEST(DaemonRecordJson, MalformedContainmentIsRefused) {
  auto refuses = [](const std::function<void(nlohmann::json&)>& edit) {
    DaemonRecord r = plain_record();
    r.containment = v1_containment();
    nlohmann::json j = r.to_json();
    edit(j["containment"]);
    return error_of([&] { DaemonRecord::from_json(j); });
  };
  auto refused = [](const std::string& e) { return e.rfind("<", 0) != 0; };  // a CudaMpsError, not "<no exception>"
  std::string e = refuses([](auto& c) { c["cgroup_version"] = 3; });
  EXPECT_TRUE(refused(e)) << e;
  e = refuses([](auto& c) { c["cgroup_version"] = 0; });
  EXPECT_TRUE(refused(e)) << e;
  e = refuses([](auto& c) { c["cgroup_version"] = 1e300; });  // no float-to-int cast (undefined behaviour)
  EXPECT_TRUE(refused(e)) << e;
  e = refuses([](auto& c) { c["cgroup_version"] = 1.5; });
  EXPECT_TRUE(refused(e)) << e;
  e = refuses([](auto& c) { c["cgroup_version"] = "1"; });
  EXPECT_TRUE(refused(e)) << e;
  e = refuses([](auto& c) { c["job_cgroup"] = ""; });
  EXPECT_TRUE(refused(e)) << e;
  e = refuses([](auto& c) { c["controllers"] = nlohmann::json::array({"freezer", "../x"}); });
  EXPECT_TRUE(refused(e)) << e;
  e = refuses([](auto& c) { c["controllers"] = nlohmann::json::array({".."}); });
  EXPECT_TRUE(refused(e)) << e;
  e = refuses([](auto& c) { c["controllers"] = "freezer"; });
  EXPECT_TRUE(refused(e)) << e;
  e = refuses([](auto& c) { c["mountpoint"] = "sys/fs/cgroup"; });
  EXPECT_TRUE(refused(e)) << e;
  e = refuses([](auto& c) { c.erase("job_cgroup"); });
  EXPECT_TRUE(refused(e)) << e;
  e = refuses([](auto& c) { c = 5; });
  EXPECT_TRUE(refused(e)) << e;
}

// --- RecordStore ----------------------------------------------------------------

class RecordStoreTest : public ::testing::Test {
 protected:
  TempDir tmp;
  std::string root() const { return tmp / "records"; }
  RecordStore store() const { return RecordStore(root(), geteuid(), getegid(), 0700, 0600); }
  DaemonRecord rec(const std::string& name, uid_t uid, const std::string& host) {
    return make_record(name, uid, host, 4242, 1, "/tmp/x/" + name + "/pipe", {test::kUuid0});
  }
};

TEST_F(RecordStoreTest, WriteReadRemove) {
  RecordStore s = store();
  EXPECT_FALSE(s.read("a"));  // no root yet: absent, not an error
  DaemonRecord r = slurm_record();
  s.write(r);
  EXPECT_EQ(test::mode_of(root()) & 07777, 0700u);
  EXPECT_EQ(test::mode_of(root() + "/job17.n1.multi.json") & 07777, 0600u);
  EXPECT_EQ(test::dir_entries(root()), (std::vector<std::string>{"job17.n1.multi.json"}));
  auto back = s.read("job17.n1.multi");
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, r);
  // Overwrite (the "starting" -> "running" update).
  r.pid = 100;
  s.write(r);
  EXPECT_EQ(s.read("job17.n1.multi")->pid, 100);
  s.remove("job17.n1.multi");
  EXPECT_FALSE(s.read("job17.n1.multi"));
  EXPECT_NO_THROW(s.remove("job17.n1.multi"));  // missing is fine
  EXPECT_TRUE(test::dir_entries(root()).empty());
}

TEST_F(RecordStoreTest, RefusesUnsafeNames) {
  RecordStore s = store();
  DaemonRecord r = rec("ok", 1, "h");
  r.name = "../escape";
  EXPECT_THROW(s.write(r), CudaMpsError);
  EXPECT_THROW(s.read("../escape"), CudaMpsError);
  EXPECT_FALSE(test::exists(tmp / "escape.json"));
}

TEST_F(RecordStoreTest, ListScopesByUidAndHost) {
  RecordStore s = store();
  s.write(rec("mine", 1000, "h1"));
  s.write(rec("mine2", 1000, "h1"));
  s.write(rec("other-user", 1001, "h1"));
  s.write(rec("other-host", 1000, "h2"));
  auto l = s.list(1000u, std::string("h1"));
  ASSERT_EQ(l.records.size(), 2u);
  EXPECT_EQ(l.records[0].name, "mine");
  EXPECT_EQ(l.records[1].name, "mine2");
  EXPECT_EQ(l.out_of_scope, 2u);
  EXPECT_TRUE(l.problems.empty());
  EXPECT_EQ(s.list(std::nullopt, std::string("h1")).records.size(), 3u);
  EXPECT_EQ(s.list(1000u, std::nullopt).records.size(), 3u);
  EXPECT_EQ(s.list(std::nullopt, std::nullopt).records.size(), 4u);
  EXPECT_EQ(s.list(7u, std::string("h9")).out_of_scope, 4u);
}

TEST_F(RecordStoreTest, ListOfAMissingRootIsEmpty) {
  auto l = store().list(std::nullopt, std::nullopt);
  EXPECT_TRUE(l.records.empty());
  EXPECT_TRUE(l.problems.empty());
}

TEST_F(RecordStoreTest, CorruptWrongNameAndSymlinkedFilesAreProblemsNeverRecords) {
  RecordStore s = store();
  s.write(rec("good", 1000, "h1"));
  test::write_text(root() + "/corrupt.json", "{ not json", 0600);
  test::write_text(root() + "/wrong.json", rec("right", 1000, "h1").to_json().dump(), 0600);
  test::write_text(root() + "/future.json", [&] {
    auto j = rec("future", 1000, "h1").to_json();
    j["schema_version"] = 2;
    return j.dump();
  }(), 0600);
  // A symlink to a perfectly valid record elsewhere.
  test::write_text(tmp / "planted.json", rec("planted", 1000, "h1").to_json().dump(), 0600);
  ASSERT_EQ(symlink((tmp / "planted.json").c_str(), (root() + "/planted.json").c_str()), 0);
  // Temp files of an atomic write and foreign files are ignored entirely.
  test::write_text(root() + "/.good.json.tmp.1234", "{", 0600);
  test::write_text(root() + "/README", "hello", 0600);

  auto l = s.list(1000u, std::string("h1"));
  ASSERT_EQ(l.records.size(), 1u);
  EXPECT_EQ(l.records[0].name, "good");
  std::map<std::string, std::string> problems;
  for (const auto& p : l.problems) problems[p.file] = p.reason;
  EXPECT_EQ(problems.size(), 4u);
  EXPECT_EQ(problems["corrupt.json"], "invalid JSON");
  EXPECT_NE(problems["wrong.json"].find("does not match"), std::string::npos) << problems["wrong.json"];
  EXPECT_NE(problems["future.json"].find("schema version 2"), std::string::npos) << problems["future.json"];
  EXPECT_NE(problems["planted.json"].find("symlink"), std::string::npos) << problems["planted.json"];
  EXPECT_FALSE(problems.count(".good.json.tmp.1234"));

  // read() of those fails closed too.
  EXPECT_NE(error_of([&] { s.read("corrupt"); }).find("corrupt"), std::string::npos);
  EXPECT_THROW(s.read("planted"), CudaMpsError);
  EXPECT_THROW(s.read("future"), CudaMpsError);

  // remove_file cleans a problem by file name.
  s.remove_file("corrupt.json");
  EXPECT_FALSE(test::exists(root() + "/corrupt.json"));
  EXPECT_TRUE(test::exists(tmp / "planted.json"));
}

TEST_F(RecordStoreTest, GroupWritableRootIsRefused) {
  RecordStore s = store();
  s.write(rec("a", 1000, "h1"));
  chmod(root().c_str(), 0770);
  EXPECT_THROW(s.list(std::nullopt, std::nullopt), CudaMpsError);
  EXPECT_THROW(s.read("a"), CudaMpsError);
  EXPECT_THROW(s.write(rec("b", 1000, "h1")), CudaMpsError);
  EXPECT_FALSE(test::exists(root() + "/b.json"));
}

TEST_F(RecordStoreTest, SymlinkedRootIsRefused) {
  test::make_dir(tmp / "real", 0700);
  ASSERT_EQ(symlink((tmp / "real").c_str(), root().c_str()), 0);
  RecordStore s = store();
  EXPECT_THROW(s.write(rec("a", 1000, "h1")), CudaMpsError);
  EXPECT_THROW(s.list(std::nullopt, std::nullopt), CudaMpsError);
  EXPECT_TRUE(test::dir_entries(tmp / "real").empty());
}

TEST_F(RecordStoreTest, RootOwnedByAnotherUserIsRefused) {
  if (!test::is_root()) GTEST_SKIP() << "needs root to chown the record root to another uid";
  RecordStore s = store();  // owner: root
  s.write(rec("a", 1000, "h1"));
  ASSERT_EQ(chown(root().c_str(), test::kOtherUid, test::kOtherGid), 0);
  std::string e = error_of([&] { s.list(std::nullopt, std::nullopt); });
  EXPECT_NE(e.find("65534"), std::string::npos) << e;
  EXPECT_THROW(s.read("a"), CudaMpsError);
  EXPECT_THROW(s.write(rec("b", 1000, "h1")), CudaMpsError);
  // A user-owned store (the CLI's) trusts its user, and that user's files.
  RecordStore theirs(root(), test::kOtherUid, test::kOtherGid, 0700, 0600);
  EXPECT_EQ(theirs.list(std::nullopt, std::nullopt).problems.size(), 1u);  // still root's file
  ASSERT_EQ(chown((root() + "/a.json").c_str(), test::kOtherUid, test::kOtherGid), 0);
  EXPECT_EQ(theirs.list(std::nullopt, std::nullopt).records.size(), 1u);
}

// Issue #12: prologs started together on a state dir that does not exist
// yet. A reader whose open fails just before another prolog creates the
// directory must see "absent" (or the record), never a stale "cannot open".
TEST_F(RecordStoreTest, ConcurrentFirstUseNeverReportsAStaleMissingStore) {
  std::vector<std::string> errors;
  std::mutex m;
  for (int round = 0; round < 80 && errors.empty(); ++round) {  // the old code failed within ~30
    std::string r = tmp / ("race" + std::to_string(round)) + "/records";
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    auto start = [&] {
      ++ready;
      while (!go) std::this_thread::yield();
    };
    auto reader = [&] {
      RecordStore s(r, geteuid(), getegid(), 0700, 0600);
      start();
      for (int i = 0; i < 200; ++i) {
        try {
          s.read("a");
          s.list(std::nullopt, std::nullopt);
          s.remove_file("gone.json");
        } catch (const CudaMpsError& e) {
          std::lock_guard<std::mutex> lock(m);
          errors.push_back(e.what());
          return;
        }
      }
    };
    auto writer = [&] {
      RecordStore s(r, geteuid(), getegid(), 0700, 0600);
      start();
      for (int i = 0; i < 3000; ++i) std::this_thread::yield();  // let the readers fail to open first
      try {
        s.write(rec("a", 1000, "h1"));
      } catch (const CudaMpsError& e) {
        std::lock_guard<std::mutex> lock(m);
        errors.push_back(std::string("writer: ") + e.what());
      }
    };
    std::vector<std::thread> threads;
    for (int i = 0; i < 3; ++i) threads.emplace_back(reader);
    for (int i = 0; i < 2; ++i) threads.emplace_back(writer);
    while (ready < 5) std::this_thread::yield();
    go = true;
    for (auto& t : threads) t.join();
  }
  EXPECT_TRUE(errors.empty()) << errors.size() << " error(s), first: " << errors.front();
}

TEST(RecordFileName, AppendsJson) { EXPECT_EQ(record_file_name("gpu-1"), "gpu-1.json"); }

// Record files written before the state/mode/topology enums replaced strings
// (tests/unit/fixtures/records, made by DaemonRecord::to_json of that code):
// each reads back and is written again byte for byte, through the store.
TEST(RecordFiles, WrittenByEarlierCodeReadAndWriteBackByteIdentical) {
  const std::string dir = std::string(UNILAB_MPS_TEST_FIXTURES) + "/records";
  const std::vector<std::string> files = test::dir_entries(dir);
  ASSERT_EQ(files.size(), 4u) << dir;
  TempDir tmp;
  RecordStore in(tmp / "in", geteuid(), getegid(), 0700, 0600);
  RecordStore out(tmp / "out", geteuid(), getegid(), 0700, 0600);
  test::make_dir(tmp / "in");
  for (const auto& f : files) {
    const std::string name = f.substr(0, f.size() - 5);
    const std::string before = test::read_text(dir + "/" + f);
    ASSERT_FALSE(before.empty()) << f;
    test::write_text(tmp / ("in/" + f), before, 0600);
    auto rec = in.read(name);
    ASSERT_TRUE(rec) << f;
    out.write(*rec);
    EXPECT_EQ(test::read_text(tmp / ("out/" + f)), before) << f;
    EXPECT_EQ(DaemonRecord::from_json(nlohmann::json::parse(before)).to_json().dump(2) + "\n", before) << f;
  }
}


// One string table per enum: every value has its own name and reads back.
template <typename E, size_t N>
void expect_table_round_trips(const StringTable<E, N>& table) {
  std::set<std::string_view> seen;
  for (size_t i = 0; i < N; ++i) {
    const E e = static_cast<E>(i);
    EXPECT_FALSE(table.name(e).empty());
    EXPECT_TRUE(seen.insert(table.name(e)).second) << table.name(e);
    EXPECT_EQ(table.lookup(table.name(e)), e) << table.name(e);
  }
  EXPECT_FALSE(table.lookup(""));
  EXPECT_FALSE(table.lookup("STARTING"));
}

TEST(EnumNames, EachTableRoundTripsAndRefusesOtherStrings) {
  expect_table_round_trips(kRecordStateNames);
  expect_table_round_trips(kJobModeNames);
  expect_table_round_trips(kTopologyModeNames);
  EXPECT_EQ(to_string(RecordState::kStarting), "starting");
  EXPECT_EQ(to_string(JobMode::kMulti), "multi");
  EXPECT_EQ(to_string(TopologyMode::kPerGpu), "task_per_gpu");
}


TEST(DaemonRecordJson, AnUnknownSlurmModeIsRefused) {
  DaemonRecord r = make_record("m", 1000, "h", 5, 6, "/run/p", {test::kUuid0});
  r.slurm = SlurmBinding{"1", "h", JobMode::kMulti, {0}, {}};
  nlohmann::json j = r.to_json();
  EXPECT_EQ(j["slurm"]["mode"], "multi");
  j["slurm"]["mode"] = "mesh";
  EXPECT_NE(error_of([&] { DaemonRecord::from_json(j); }).find("unknown mode 'mesh'"), std::string::npos);
}

}  // namespace
}  // namespace unilab::mps
