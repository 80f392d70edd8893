// common/slurm/slurm_files.cpp: slurm.conf and plugstack.conf as Slurm reads them.
#include "common/slurm/slurm_files.hpp"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include "common/mps/errors.hpp"
#include "tests/unit/fake_node_probe.hpp"

namespace unilab::mps {
namespace {

TEST(PlugstackTest, ParsesLikeSlurm) {
  FakeNodeProbe probe;
  probe.files["/e/plugstack.conf"] =
      "  # comment\n"
      "optional /p/a.so x=1\ty=2 # trailing\n"
      "bogus /p/b.so\n"
      "required\n"
      "include extra/*.conf\n"
      "include /e/loop.conf\n";
  probe.globs["/e/extra/*.conf"] = {"/e/extra/1.conf", "/e/extra/2.conf"};
  probe.files["/e/extra/1.conf"] = "required rel.so\n";
  probe.files["/e/extra/2.conf"] = "\n";
  probe.globs["/e/loop.conf"] = {"/e/loop.conf"};
  probe.files["/e/loop.conf"] = "include /e/loop.conf\n";
  probe.facts["/lib/b/rel.so"] = FakeNodeProbe::file(0, 0755);
  Plugstack s = read_plugstack(probe, "/e/plugstack.conf", {"/lib/a", "/lib/b/"});
  ASSERT_EQ(s.entries.size(), 2u);
  EXPECT_EQ(s.entries[0].kind, "optional");
  EXPECT_EQ(s.entries[0].path, "/p/a.so");
  EXPECT_EQ(s.entries[0].line, 2);
  EXPECT_EQ(s.entries[0].args, (std::vector<std::string>{"x=1", "y=2"}));
  EXPECT_EQ(s.entries[1].file, "/e/extra/1.conf");
  EXPECT_EQ(s.entries[1].resolved, "/lib/b/rel.so");
  EXPECT_EQ(s.files.front(), "/e/plugstack.conf");
  EXPECT_EQ(s.files[1], "/e/extra/1.conf");
  // bogus kind, missing path, and the include loop cut off at the depth limit
  ASSERT_EQ(s.problems.size(), 3u);
  EXPECT_NE(s.problems[0].find("/e/plugstack.conf:3: 'bogus'"), std::string::npos);
  EXPECT_NE(s.problems[1].find("/e/plugstack.conf:4: no plugin path"), std::string::npos);
  EXPECT_NE(s.problems[2].find("nested deeper"), std::string::npos);
}

TEST(PlugstackTest, MissingFileIsAnEmptyStack) {
  FakeNodeProbe probe;
  Plugstack s = read_plugstack(probe, "/nope/plugstack.conf", {});
  EXPECT_TRUE(s.files.empty());
  EXPECT_TRUE(s.entries.empty());
  EXPECT_TRUE(s.problems.empty());
}

TEST(SlurmConfTest, KeysAreCaseInsensitiveAndNodeLinesSeparate) {
  FakeNodeProbe probe;
  probe.files["/e/slurm.conf"] = "plugstackconfig=/a\nJobContainerType=job_container/tmpfs # x\n"
                                 "NodeName=n1 Port=1 PlugStackConfig=/ignored\nPartitionName=p PlugStackConfig=/ignored2\n"
                                 "Include missing.conf\n";
  SlurmConf c = read_slurm_conf(probe, "/e/slurm.conf");
  EXPECT_EQ(c.get("plugstackconfig"), "/a");
  EXPECT_EQ(c.get("jobcontainertype"), "job_container/tmpfs");
  ASSERT_EQ(c.nodes.size(), 1u);
  EXPECT_EQ(c.nodes[0].at("port"), "1");
  ASSERT_EQ(c.problems.size(), 1u);
  EXPECT_NE(c.problems[0].find("/e/missing.conf"), std::string::npos);
  EXPECT_THROW(read_slurm_conf(probe, "/e/none.conf"), CudaMpsError);
}

TEST(NodeGresTest, ReadsTheNodesGpuGresInSlurmConfsOrder) {
  FakeNodeProbe probe;
  probe.files["/e/slurm.conf"] =
      "NodeName=DEFAULT Gres=gpu:2\n"
      "NodeName=n[1-2] CPUs=8 Gres=gpu:h200:2,mps:200,gpu:1g.18gb:2(S:0-1),gpu:3g.71gb:1K\n"
      "NodeName=n3 CPUs=8\n"
      "NodeName=n4 Gres=gpu:a100,gpu:4\n"
      "NodeName=bad Gres=gpu:x:y:3\n";
  const SlurmConf conf = read_slurm_conf(probe, "/e/slurm.conf");
  EXPECT_EQ(node_gres(conf, "n2"), (std::vector<NodeGres>{{"h200", 2}, {"1g.18gb", 2}, {"3g.71gb", 1024}}));
  EXPECT_EQ(node_gres(conf, "n3"), (std::vector<NodeGres>{{"", 2}}));  // NodeName=DEFAULT
  EXPECT_EQ(node_gres(conf, "n4"), (std::vector<NodeGres>{{"a100", 1}, {"", 4}}));
  EXPECT_FALSE(node_gres(conf, "n9").has_value());
  EXPECT_THROW(node_gres(conf, "bad"), CudaMpsError);
}

TEST(NodePatternTest, ExpandsNodeAndHost) {
  EXPECT_EQ(expand_node_pattern("/run/slurmd-%n.%h.pid", "n1", "vm"), "/run/slurmd-n1.vm.pid");
  EXPECT_EQ(expand_node_pattern("/run/100%.pid", "n1", "vm"), "/run/100%.pid");
}

}  // namespace
}  // namespace unilab::mps
