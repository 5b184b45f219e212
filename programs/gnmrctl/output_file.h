// OutputFile: an output that appears whole or not at all. Written under
// PATH.tmp and renamed onto PATH by Commit(); dropped (tmp removed) if not
// committed, so a failed command never leaves a truncated file behind.
// "-" or "" is stdout.
#pragma once

#include <cstdio>
#include <string>

#include "gnmr/status.h"

namespace gnmr {
namespace cli {

class OutputFile {
 public:
  OutputFile() = default;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile();

  // NotFound when PATH.tmp cannot be created.
  Status Open(const std::string& path);
  // Closes and renames; DataLoss when writing failed.
  Status Commit();

  std::FILE* file() const { return file_; }
  // PATH, or "<stdout>".
  const std::string& name() const { return name_; }

 private:
  std::FILE* file_ = nullptr;
  std::string path_, tmp_, name_;
};

}  // namespace cli
}  // namespace gnmr
