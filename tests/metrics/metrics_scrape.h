// Test helpers: fetch /metrics over a plain socket and read samples from
// the text exposition format.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <sstream>
#include <string>

namespace gnmr {
namespace testing_util {

struct HttpResponse {
  int status = 0;
  std::string body;
};

// GET `path` from 127.0.0.1:`port` (HTTP/1.0: the server closes the
// connection after the response). status 0 on a connection failure, or
// when no answer came within `timeout_s` seconds (0: no limit).
inline HttpResponse HttpGet(int port, const std::string& path, int timeout_s = 0) {
  HttpResponse r;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return r;
  if (timeout_s > 0) {
    timeval tv{};
    tv.tv_sec = timeout_s;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return r;
  }
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (::send(fd, request.data(), request.size(), 0) != static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return r;
  }
  std::string raw;
  char buf[65536];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;) raw.append(buf, n);
  ::close(fd);
  // "HTTP/1.1 200 OK\r\n...\r\n\r\nbody"
  const size_t sp = raw.find(' ');
  const size_t end = raw.find("\r\n\r\n");
  if (sp == std::string::npos || end == std::string::npos) return r;
  r.status = std::atoi(raw.c_str() + sp + 1);
  r.body = raw.substr(end + 4);
  return r;
}

// Samples of an exposition text: "name{labels}" -> value.
inline std::map<std::string, double> ParseSamples(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    out[line.substr(0, sp)] = std::strtod(line.c_str() + sp + 1, nullptr);
  }
  return out;
}

// Number of samples whose series starts with `prefix`.
inline size_t CountSeries(const std::map<std::string, double>& samples, const std::string& prefix) {
  size_t n = 0;
  for (const auto& [series, value] : samples) {
    if (series.compare(0, prefix.size(), prefix) == 0) ++n;
  }
  return n;
}

}  // namespace testing_util
}  // namespace gnmr
