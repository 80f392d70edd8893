/* Test-only LD_PRELOAD shim for slurmd/slurmstepd 24.11 with cgroup v2 on a
 * machine whose cgroups are mounted hybrid (v1 controllers + a v2 hierarchy).
 *
 * What it works around: slurmd's cgroup/v2 plugin reads /proc/<pid>/cgroup
 * and refuses to start ("Hybrid mode is not supported") when that file lists
 * any v1 hierarchy. The kernel lists every mounted v1 hierarchy there in every
 * mount namespace, so a test cannot hide them by mounts alone. This shim
 * makes every open of /proc/{self,thread-self,PID}[/task/TID]/cgroup return
 * only the file's "0::PATH" line (the v2 hierarchy), as on a v2-only host.
 *
 * What could differ on a real v2-only host (systemd, cgroup_no_v1=all): the
 * v2 controllers (cpu, memory, cpuset, pids, io) are available there, here
 * they stay bound to the v1 hierarchies, so only ConstrainDevices (a BPF
 * program, no controller) is exercised; slurmd runs with IgnoreSystemd=yes
 * here, under systemd it would ask systemd for its scope over dbus; the
 * cgroup tree is shared with the host's v2 hierarchy, not delegated.
 * Never use this outside tests/e2e. Built by tests/e2e/cgroup2/build.sh. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef int (*openat_fn)(int, const char *, int, ...);

static int digits(const char **p)
{
	const char *q = *p;
	while (*q >= '0' && *q <= '9')
		q++;
	if (q == *p)
		return 0;
	*p = q;
	return 1;
}

/* /proc/self/cgroup, /proc/thread-self/cgroup, /proc/PID/cgroup,
 * /proc/PID/task/TID/cgroup */
static int is_proc_cgroup(const char *p)
{
	if (!p || strncmp(p, "/proc/", 6) != 0)
		return 0;
	p += 6;
	if (strncmp(p, "self/", 5) == 0)
		p += 5;
	else if (strncmp(p, "thread-self/", 12) == 0)
		p += 12;
	else if (digits(&p) && *p == '/') {
		p++;
		if (strncmp(p, "task/", 5) == 0) {
			p += 5;
			if (!digits(&p) || *p != '/')
				return 0;
			p++;
		}
	} else
		return 0;
	return strcmp(p, "cgroup") == 0;
}

/* A memfd holding only the "0::" lines of the real file (O_CLOEXEC kept). */
static int filtered(int dirfd, const char *path, int flags)
{
	openat_fn real = (openat_fn)dlsym(RTLD_NEXT, "openat");
	char buf[16384], out[16384];
	size_t len = 0, olen = 0;
	ssize_t n;
	int fd = real(dirfd, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return fd;
	while (len < sizeof(buf) - 1 && (n = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0)
		len += (size_t)n;
	close(fd);
	buf[len] = '\0';
	for (char *line = buf, *nl; line && *line; line = nl) {
		nl = strchr(line, '\n');
		size_t l = nl ? (size_t)(nl - line) + 1 : strlen(line);
		if (strncmp(line, "0::", 3) == 0 && olen + l <= sizeof(out)) {
			memcpy(out + olen, line, l);
			olen += l;
		}
		nl = nl ? nl + 1 : NULL;
	}
	fd = memfd_create("proc-cgroup-v2", (flags & O_CLOEXEC) ? MFD_CLOEXEC : 0);
	if (fd < 0)
		return fd;
	if (write(fd, out, olen) != (ssize_t)olen || lseek(fd, 0, SEEK_SET) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static int do_openat(int dirfd, const char *path, int flags, mode_t mode)
{
	if (is_proc_cgroup(path) && (flags & O_ACCMODE) == O_RDONLY)
		return filtered(dirfd, path, flags);
	return ((openat_fn)dlsym(RTLD_NEXT, "openat"))(dirfd, path, flags, mode);
}

static mode_t mode_arg(int flags, va_list ap)
{
	return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t m = mode_arg(flags, ap);
	va_end(ap);
	return do_openat(AT_FDCWD, path, flags, m);
}

int openat(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t m = mode_arg(flags, ap);
	va_end(ap);
	return do_openat(dirfd, path, flags, m);
}

int open64(const char *path, int flags, ...) __attribute__((alias("open")));
int openat64(int dirfd, const char *path, int flags, ...) __attribute__((alias("openat")));

int __open_2(const char *path, int flags) { return do_openat(AT_FDCWD, path, flags, 0); }
int __open64_2(const char *path, int flags) { return do_openat(AT_FDCWD, path, flags, 0); }

FILE *fopen(const char *path, const char *mode)
{
	typedef FILE *(*fopen_fn)(const char *, const char *);
	if (is_proc_cgroup(path) && mode[0] == 'r' && !strchr(mode, '+')) {
		int fd = filtered(AT_FDCWD, path, strchr(mode, 'e') ? O_CLOEXEC : 0);
		return fd < 0 ? NULL : fdopen(fd, mode);
	}
	return ((fopen_fn)dlsym(RTLD_NEXT, "fopen"))(path, mode);
}

FILE *fopen64(const char *path, const char *mode) __attribute__((alias("fopen")));
