// Whole-file reads and atomic writes (temporary file, fsync, rename).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace onnxtrain {

// Reads a whole file; throws an Error naming the file when it cannot.
std::string read_file(const std::filesystem::path& path);

// A file written under a temporary name beside its destination and renamed over it by
// commit(). Destroyed without commit(), it removes the temporary file: the destination is
// never left half-written.
class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path path);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  const std::filesystem::path& path() const { return path_; }
  const std::filesystem::path& temporary_path() const { return temporary_; }
  // Flushes the temporary file to disk and renames it over the destination.
  void commit();

 private:
  std::filesystem::path path_;
  std::filesystem::path temporary_;
  bool committed_ = false;
};

void write_file_atomically(const std::filesystem::path& path, std::string_view bytes);

}  // namespace onnxtrain
