// A server-sent events (text/event-stream) parser: bytes in, events' data
// out, whatever the byte boundaries the network splits the stream at.
// It follows the WHATWG rules an OpenAI stream uses: lines end in "\n",
// "\r\n" or "\r"; "data:" lines (one optional space after the colon) add a
// line to the event's data; a blank line dispatches the event; lines that
// start with ':' are comments; other fields (event, id, retry) are ignored.
// Header-only so that any test binary can use it without linking the HTTP
// client library.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace servesim {

class SseParser {
 public:
  // A line longer than this (a runaway stream without newlines) is an error:
  // feed() returns false and the parser stops.
  explicit SseParser(size_t max_line_bytes = size_t(16) << 20) : max_line_(max_line_bytes) {}

  // Parses `bytes`; every event completed by them is appended to `events`
  // (its data lines joined with '\n'). False once a line overflowed.
  bool feed(std::string_view bytes, std::vector<std::string>& events) {
    if (failed_) return false;
    for (char c : bytes) {
      if (after_cr_) {
        after_cr_ = false;
        if (c == '\n') continue;  // the "\n" of a "\r\n"
      }
      if (c == '\r' || c == '\n') {
        after_cr_ = c == '\r';
        end_line(events);
        continue;
      }
      if (line_.size() >= max_line_) {
        failed_ = true;
        return false;
      }
      line_.push_back(c);
    }
    return true;
  }

  // The stream ended: an event without its closing blank line is dropped,
  // as the standard says. True when nothing was pending.
  bool finish() const { return line_.empty() && !has_data_; }
  bool failed() const { return failed_; }

 private:
  void end_line(std::vector<std::string>& events) {
    if (line_.empty()) {  // blank line: dispatch
      if (has_data_) events.push_back(std::move(data_));
      data_.clear();
      has_data_ = false;
      return;
    }
    const std::string_view line(line_);
    if (line.front() != ':') {
      const size_t colon = line.find(':');
      const std::string_view field = line.substr(0, colon);
      std::string_view value = colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
      if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
      if (field == "data") {
        if (has_data_) data_.push_back('\n');
        data_.append(value);
        has_data_ = true;
      }
    }
    line_.clear();
  }

  size_t max_line_;
  std::string line_, data_;
  bool has_data_ = false, after_cr_ = false, failed_ = false;
};

}  // namespace servesim
