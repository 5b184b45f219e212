#include "programs/gnmrctl/output_file.h"

#include <cerrno>
#include <cstring>

namespace gnmr {
namespace cli {

OutputFile::~OutputFile() {
  if (file_ != nullptr && file_ != stdout) {
    std::fclose(file_);
    std::remove(tmp_.c_str());
  }
}

Status OutputFile::Open(const std::string& path) {
  if (path.empty() || path == "-") {
    file_ = stdout;
    name_ = "<stdout>";
    return Status::Ok();
  }
  path_ = name_ = path;
  tmp_ = path + ".tmp";
  file_ = std::fopen(tmp_.c_str(), "wb");
  if (file_ == nullptr) {
    return NotFound(path + ": cannot open for writing: " + std::strerror(errno));
  }
  return Status::Ok();
}

Status OutputFile::Commit() {
  if (file_ == stdout) return Status::Ok();
  const bool failed = std::fclose(file_) != 0;
  file_ = nullptr;
  if (failed || std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    Status s = DataLoss(path_ + ": cannot write: " + std::strerror(errno));
    std::remove(tmp_.c_str());
    return s;
  }
  return Status::Ok();
}

}  // namespace cli
}  // namespace gnmr
