#include "common/slurm/slurm_conf_path.hpp"

#include <set>

#include <gtest/gtest.h>

namespace unilab::mps {
namespace {

TEST(LocateSlurmConfTest, SlurmsOwnOrder) {
  std::set<std::string> files;
  std::optional<ConfiglessCache> link;  // the /run/slurm/conf link: none
  auto exists = [&](const std::string& p) { return files.count(p) != 0; };
  auto cache = [&] { return link; };
  // Nothing there: the default, whose absence the caller reports.
  EXPECT_EQ(locate_slurm_conf(std::nullopt, exists, cache).path, "/etc/slurm/slurm.conf");
  // A configless node: slurmd's /run/slurm/conf link to <SlurmdSpoolDir>/conf-cache.
  link = ConfiglessCache{"/var/spool/slurmd/conf-cache", ""};
  SlurmConfLocation c = locate_slurm_conf(std::nullopt, exists, cache);
  EXPECT_EQ(c.path, "/run/slurm/conf/slurm.conf");
  EXPECT_EQ(c.source, "configless cache");
  EXPECT_TRUE(c.configless());
  EXPECT_EQ(c.cache_target, "/var/spool/slurmd/conf-cache");
  EXPECT_EQ(c.dir(), "/run/slurm/conf");
  EXPECT_EQ(c.describe(), "/run/slurm/conf/slurm.conf (configless cache: /run/slurm/conf -> /var/spool/slurmd/conf-cache)");
  // The compiled-in default wins over the cache when it exists (as in Slurm's commands).
  files.insert("/etc/slurm/slurm.conf");
  EXPECT_EQ(locate_slurm_conf(std::nullopt, exists, cache).source, "default");
  EXPECT_EQ(locate_slurm_conf(std::nullopt, exists, cache, "/usr/local/etc/slurm.conf").path, "/run/slurm/conf/slurm.conf");
  // SLURM_CONF always wins: inside slurmd, slurmstepd and the prolog it names the cache itself.
  c = locate_slurm_conf(std::string("/var/spool/slurmd/conf-cache/slurm.conf"), exists, cache);
  EXPECT_EQ(c.source, "SLURM_CONF");
  EXPECT_FALSE(c.configless());
  EXPECT_EQ(c.dir(), "/var/spool/slurmd/conf-cache");
  EXPECT_EQ(locate_slurm_conf(std::string(), exists, cache).source, "default");  // set but empty: unset
}

TEST(LocateSlurmConfTest, AnUntrustedCacheLinkIsNotFollowed) {
  auto none = [](const std::string&) { return false; };
  auto planted = [] { return std::optional<ConfiglessCache>(ConfiglessCache{"/tmp/x", "the symlink /run/slurm/conf belongs to uid 1000, not root"}); };
  SlurmConfLocation c = locate_slurm_conf(std::nullopt, none, planted);
  EXPECT_EQ(c.path, "/etc/slurm/slurm.conf");
  EXPECT_EQ(c.source, "default");
  EXPECT_FALSE(c.configless());
  EXPECT_EQ(c.describe(), "/etc/slurm/slurm.conf (default); the configless cache /run/slurm/conf is not used: the symlink "
                          "/run/slurm/conf belongs to uid 1000, not root");
}

}  // namespace
}  // namespace unilab::mps
