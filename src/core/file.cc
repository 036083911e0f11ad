#include "core/file.h"

#include <fcntl.h>
#include <onnxtrain/error.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>

namespace onnxtrain {
namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error("cannot open '" + path.string() + "': " + std::strerror(errno), ErrorKind::kIO);
  }
  std::string bytes;
  in.seekg(0, std::ios::end);
  bytes.resize(static_cast<size_t>(in.tellg()));
  in.seekg(0);
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!in) throw Error("cannot read '" + path.string() + "'", ErrorKind::kIO);
  return bytes;
}

namespace {

// Removes "<path>.tmp-<pid>-<n>" files left by writers that died (killed mid-save).
void remove_stale_temporaries(const fs::path& path) {
  const fs::path folder = path.has_parent_path() ? path.parent_path() : fs::path(".");
  const std::string prefix = path.filename().string() + ".tmp-";
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(folder, error)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(prefix)) continue;
    const pid_t pid = static_cast<pid_t>(std::atol(name.c_str() + prefix.size()));
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) fs::remove(entry.path(), error);
  }
}

}  // namespace

AtomicFile::AtomicFile(fs::path path) : path_(std::move(path)) {
  remove_stale_temporaries(path_);
  std::random_device random;
  temporary_ = path_;
  temporary_ += ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(random());
}

AtomicFile::~AtomicFile() {
  if (!committed_) {
    std::error_code ignored;
    fs::remove(temporary_, ignored);
  }
}

void AtomicFile::commit() {
  const int fd = ::open(temporary_.c_str(), O_RDONLY);
  if (fd < 0 || ::fsync(fd) != 0) {
    if (fd >= 0) ::close(fd);
    throw Error("cannot flush '" + temporary_.string() + "': " + std::strerror(errno), ErrorKind::kIO);
  }
  ::close(fd);
  std::error_code error;
  fs::rename(temporary_, path_, error);
  if (error) throw Error("cannot write '" + path_.string() + "': " + error.message(), ErrorKind::kIO);
  committed_ = true;
  // Make the rename itself durable. A failed fsync here is an error: until it succeeds a
  // power cut may bring the previous file back, so the save must not report success.
  const fs::path folder = path_.has_parent_path() ? path_.parent_path() : fs::path(".");
  const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY);
  // EINVAL: a file system that cannot sync a folder (some network ones); nothing to wait for.
  if (dir < 0 || (::fsync(dir) != 0 && errno != EINVAL)) {
    const int error_number = errno;
    if (dir >= 0) ::close(dir);
    throw Error("cannot make the rename of '" + path_.string() + "' durable (fsync of its folder '" + folder.string() +
                    "'): " + std::strerror(error_number),
                ErrorKind::kIO);
  }
  ::close(dir);
}

void write_file_atomically(const fs::path& path, std::string_view bytes) {
  AtomicFile file(path);
  {
    std::ofstream out(file.temporary_path(), std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) throw Error("cannot write '" + path.string() + "': " + std::strerror(errno), ErrorKind::kIO);
  }
  file.commit();
}

}  // namespace onnxtrain
