#include "common/slurm/slurm_conf_path.hpp"

#include <set>

#include <gtest/gtest.h>

namespace unilab::mps {
namespace {

TEST(LocateSlurmConfTest, SlurmsOwnOrder) {
  std::set<std::string> files;
  auto exists = [&](const std::string& p) { return files.count(p) != 0; };
  // Nothing there: the default, whose absence the caller reports.
  EXPECT_EQ(locate_slurm_conf(std::nullopt, exists).path, "/etc/slurm/slurm.conf");
  // A configless node: slurmd's /run/slurm/conf link to <SlurmdSpoolDir>/conf-cache.
  files.insert("/run/slurm/conf/slurm.conf");
  SlurmConfLocation c = locate_slurm_conf(std::nullopt, exists);
  EXPECT_EQ(c.path, "/run/slurm/conf/slurm.conf");
  EXPECT_EQ(c.source, "configless cache");
  EXPECT_EQ(c.dir(), "/run/slurm/conf");
  // The compiled-in default wins over the cache when it exists (as in Slurm's commands).
  files.insert("/etc/slurm/slurm.conf");
  EXPECT_EQ(locate_slurm_conf(std::nullopt, exists).source, "default");
  EXPECT_EQ(locate_slurm_conf(std::nullopt, exists, "/usr/local/etc/slurm.conf").path, "/run/slurm/conf/slurm.conf");
  // SLURM_CONF always wins: inside slurmd, slurmstepd and the prolog it names the cache itself.
  c = locate_slurm_conf(std::string("/var/spool/slurmd/conf-cache/slurm.conf"), exists);
  EXPECT_EQ(c.source, "SLURM_CONF");
  EXPECT_EQ(c.dir(), "/var/spool/slurmd/conf-cache");
  EXPECT_EQ(locate_slurm_conf(std::string(), exists).source, "default");  // set but empty: unset
}

}  // namespace
}  // namespace unilab::mps
