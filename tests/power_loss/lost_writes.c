// LD_PRELOAD shim for scripts/power_loss_check.sh: simulates a power cut, or a failing disk, at
// the Nth file-system call (write, pwrite, fsync, fdatasync, rename) after it is armed.
//
// Armed from the process itself (powerloss_arm(n, mode), found with dlsym / ctypes), so a
// parent that imported everything can fork, arm the child and let it save. Modes:
//   0 kill       the process dies before the Nth call, as under kill -9: the page cache survives.
//   1 power      the process dies before the Nth call and what no fsync made durable is lost:
//                each file written is cut back to the size its last fsync saw (a file never
//                fsynced to nothing), and a rename no fsync of its folder made durable is undone
//                (the file it replaced comes back).
//   2 torn       like power, but the Nth call, a write, first writes half its bytes, and a
//                rename survives the cut while the data it points to may not (metadata
//                journaled ahead of data, as ext4 data=writeback allows).
//   3 eio        the Nth call fails with EIO and the process goes on (an error path to test).
//   4 eio_cut    like eio; the driver then cuts the power once the save returns, as power
//                does: a save that reported success despite a failed fsync is caught.
// This is a pessimistic model of a POSIX file system: it keeps nothing an fsync did not promise.
// powerloss_cut() cuts the power at once (after a save returned: what it promised must stay).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

enum { kKill = 0, kPower = 1, kTorn = 2, kEio = 3, kEioCut = 4 };
enum { kMaxFiles = 64 };

// A file written since it was armed: the size the last fsync made durable.
struct Tracked {
  char path[PATH_MAX];
  long long durable_size;  // -1: never fsynced, the file is lost whole
  int dirty;
};

// A rename over an existing file whose folder was not fsynced after it.
struct PendingRename {
  char destination[PATH_MAX];
  char backup[PATH_MAX + 32];  // a hard link to the replaced file, made before the rename
  char folder[PATH_MAX];
  int active;
};

static long long g_trigger = 0;  // 0: disarmed
static long long g_calls = 0;
static int g_mode = kKill;
static struct Tracked g_files[kMaxFiles];
static int g_file_count = 0;
static struct PendingRename g_rename;

// Every call made since arming, for the driver to spread the failure points over a save.
long long powerloss_calls(void) {
  return g_calls;
}

void powerloss_arm(long long n, int mode) {
  g_trigger = n;
  g_mode = mode;
  g_calls = 0;
  g_file_count = 0;
  g_rename.active = 0;
}

static int fd_path(int fd, char* out) {
  char link[64];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, out, PATH_MAX - 1);
  if (n < 0) return -1;
  out[n] = '\0';
  return 0;
}

static struct Tracked* tracked(const char* path) {
  for (int i = 0; i < g_file_count; ++i) {
    if (strcmp(g_files[i].path, path) == 0) return &g_files[i];
  }
  if (g_file_count == kMaxFiles) return NULL;
  struct Tracked* t = &g_files[g_file_count++];
  snprintf(t->path, sizeof t->path, "%s", path);
  t->durable_size = -1;
  t->dirty = 0;
  return t;
}

static void folder_of(const char* path, char* out) {
  snprintf(out, PATH_MAX, "%s", path);
  char* slash = strrchr(out, '/');
  if (slash == NULL) {
    snprintf(out, PATH_MAX, ".");
  } else if (slash == out) {
    out[1] = '\0';
  } else {
    *slash = '\0';
  }
}

// The power cut: drop what was not made durable, then die without flushing anything.
static void lose_power(void) {
  if (g_mode != kKill) {
    for (int i = 0; i < g_file_count; ++i) {
      struct Tracked* t = &g_files[i];
      if (!t->dirty) continue;
      if (t->durable_size < 0) {
        unlink(t->path);
      } else {
        truncate(t->path, t->durable_size);
      }
    }
    if (g_rename.active && (g_mode == kPower || g_mode == kEioCut)) {  // the directory entry still names the old file
      int (*real_rename)(const char*, const char*) = dlsym(RTLD_NEXT, "rename");
      real_rename(g_rename.backup, g_rename.destination);
    }
  }
  _exit(137);
}

void powerloss_cut(void) {
  lose_power();
}

// Counts one call; returns 1 when this call is the one to fail (mode eio or torn).
static int fail_here(void) {
  if (g_trigger == 0) return 0;
  if (++g_calls != g_trigger) return 0;
  if (g_mode == kKill || g_mode == kPower) lose_power();
  return 1;
}

// Only writes to regular files count (not the driver's pipe, not a terminal).
static int regular(int fd) {
  struct stat info;
  return fd > 2 && fstat(fd, &info) == 0 && S_ISREG(info.st_mode);
}

static void after_write(int fd) {
  char path[PATH_MAX];
  if (g_trigger == 0 || fd_path(fd, path) != 0) return;
  struct Tracked* t = tracked(path);
  if (t != NULL) t->dirty = 1;
}

ssize_t write(int fd, const void* data, size_t bytes) {
  static ssize_t (*real)(int, const void*, size_t);
  if (!real) real = dlsym(RTLD_NEXT, "write");
  if (regular(fd) && fail_here()) {
    if (g_mode == kEio || g_mode == kEioCut) {
      errno = EIO;
      return -1;
    }
    after_write(fd);
    real(fd, data, bytes / 2);  // torn: half of it reached the page cache, then the power went
    lose_power();
  }
  const ssize_t n = real(fd, data, bytes);
  if (n > 0 && regular(fd)) after_write(fd);
  return n;
}

ssize_t pwrite(int fd, const void* data, size_t bytes, off_t offset) {
  static ssize_t (*real)(int, const void*, size_t, off_t);
  if (!real) real = dlsym(RTLD_NEXT, "pwrite");
  if (regular(fd) && fail_here()) {
    if (g_mode == kEio || g_mode == kEioCut) {
      errno = EIO;
      return -1;
    }
    after_write(fd);
    real(fd, data, bytes / 2, offset);
    lose_power();
  }
  const ssize_t n = real(fd, data, bytes, offset);
  if (n > 0 && regular(fd)) after_write(fd);
  return n;
}

static int sync_common(int fd, int (*real)(int)) {
  if (fail_here()) {  // eio or torn (a torn fsync is a power cut before it)
    if (g_mode == kTorn) lose_power();
    errno = EIO;
    return -1;
  }
  const int result = real(fd);
  char path[PATH_MAX];
  struct stat info;
  if (result == 0 && g_trigger != 0 && fd_path(fd, path) == 0 && fstat(fd, &info) == 0) {
    if (S_ISDIR(info.st_mode)) {
      if (g_rename.active && strcmp(g_rename.folder, path) == 0) {
        unlink(g_rename.backup);  // the rename is durable: the old file is gone for good
        g_rename.active = 0;
      }
    } else {
      struct Tracked* t = tracked(path);
      if (t != NULL) {
        t->durable_size = info.st_size;
        t->dirty = 0;
      }
    }
  }
  return result;
}

int fsync(int fd) {
  static int (*real)(int);
  if (!real) real = dlsym(RTLD_NEXT, "fsync");
  return sync_common(fd, real);
}

int fdatasync(int fd) {
  static int (*real)(int);
  if (!real) real = dlsym(RTLD_NEXT, "fdatasync");
  return sync_common(fd, real);
}

int rename(const char* from, const char* to) {
  static int (*real)(const char*, const char*);
  if (!real) real = dlsym(RTLD_NEXT, "rename");
  if (fail_here()) {
    if (g_mode == kTorn) lose_power();
    errno = EIO;
    return -1;
  }
  if (g_trigger == 0) return real(from, to);
  char absolute_from[PATH_MAX];
  if (realpath(from, absolute_from) == NULL) absolute_from[0] = '\0';
  // Keep the file `to` names now, so a power cut before the folder's fsync can bring it back.
  // (One rename in flight is all an atomic save makes.)
  char absolute_to[PATH_MAX];
  g_rename.active = 0;
  if (realpath(to, absolute_to) != NULL) {
    snprintf(g_rename.destination, PATH_MAX, "%s", absolute_to);
    snprintf(g_rename.backup, sizeof g_rename.backup, "%s.powerloss-backup", absolute_to);
    folder_of(absolute_to, g_rename.folder);
    unlink(g_rename.backup);
    g_rename.active = link(absolute_to, g_rename.backup) == 0;
  }
  const int result = real(from, to);
  if (result != 0) {
    if (g_rename.active) unlink(g_rename.backup);
    g_rename.active = 0;
    return result;
  }
  // What was written under the old name now lives under the new one.
  if (realpath(to, absolute_to) != NULL) {
    for (int i = 0; i < g_file_count; ++i) {
      if (strcmp(g_files[i].path, absolute_from) == 0) snprintf(g_files[i].path, PATH_MAX, "%s", absolute_to);
    }
  }
  return result;
}
