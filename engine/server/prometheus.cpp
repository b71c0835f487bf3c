#include "engine/server/prometheus.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace servesim {

std::string prom_number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{:.1f}", v);
  return fmt::format("{}", v);  // shortest round-trip form
}

namespace {

// Label values escape backslash, double quote and newline (exposition format).
std::string escape_label(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string label_text(const PromLabels& labels, const std::string& le = {}) {
  PromLabels all = labels;
  if (!le.empty()) all["le"] = le;
  if (all.empty()) return "";
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : all) {
    if (!first) out += ',';
    first = false;
    out += k + "=\"" + escape_label(v) + "\"";
  }
  return out + "}";
}

}  // namespace

void PromRegistry::Counter::inc(double by) {
  std::lock_guard lock(owner_->mutex_);
  if (by > 0) value_ += by;  // counters never go down
}
double PromRegistry::Counter::value() const {
  std::lock_guard lock(owner_->mutex_);
  return value_;
}
void PromRegistry::Gauge::set(double v) {
  std::lock_guard lock(owner_->mutex_);
  value_ = v;
}
double PromRegistry::Gauge::value() const {
  std::lock_guard lock(owner_->mutex_);
  return value_;
}
void PromRegistry::Histogram::observe(double v) {
  std::lock_guard lock(owner_->mutex_);
  // Bucket `le` counts observations <= le.
  const size_t b = size_t(std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), v) - upper_bounds_.begin());
  ++counts_[b];
  ++count_;
  sum_ += v;
}
int64_t PromRegistry::Histogram::count() const {
  std::lock_guard lock(owner_->mutex_);
  return count_;
}
double PromRegistry::Histogram::sum() const {
  std::lock_guard lock(owner_->mutex_);
  return sum_;
}

PromRegistry::Family& PromRegistry::family(const std::string& name, const std::string& help, Kind kind) {
  for (auto& f : families_)
    if (f->name == name) {
      if (f->kind != kind) throw std::logic_error("metric " + name + " registered with two types");
      return *f;
    }
  families_.push_back(std::make_unique<Family>(Family{name, help, kind, {}}));
  return *families_.back();
}

PromRegistry::Series& PromRegistry::series(Family& f, const PromLabels& labels) {
  for (Series& s : f.series)
    if (s.labels == labels) return s;
  f.series.push_back(Series{labels, nullptr, nullptr, nullptr});
  return f.series.back();
}

PromRegistry::Counter& PromRegistry::counter(const std::string& name, const std::string& help,
                                             const PromLabels& labels) {
  std::lock_guard lock(mutex_);
  Series& s = series(family(name, help, Kind::Counter), labels);
  if (!s.counter) {
    s.counter = std::make_unique<Counter>();
    s.counter->owner_ = this;
  }
  return *s.counter;
}

PromRegistry::Gauge& PromRegistry::gauge(const std::string& name, const std::string& help, const PromLabels& labels) {
  std::lock_guard lock(mutex_);
  Series& s = series(family(name, help, Kind::Gauge), labels);
  if (!s.gauge) {
    s.gauge = std::make_unique<Gauge>();
    s.gauge->owner_ = this;
  }
  return *s.gauge;
}

PromRegistry::Histogram& PromRegistry::histogram(const std::string& name, const std::string& help,
                                                 const PromLabels& labels, std::vector<double> upper_bounds) {
  if (!std::is_sorted(upper_bounds.begin(), upper_bounds.end()) ||
      std::adjacent_find(upper_bounds.begin(), upper_bounds.end()) != upper_bounds.end())
    throw std::logic_error("histogram " + name + ": bucket bounds must increase");
  std::lock_guard lock(mutex_);
  Series& s = series(family(name, help, Kind::Histogram), labels);
  if (!s.histogram) {
    s.histogram = std::make_unique<Histogram>();
    s.histogram->owner_ = this;
    s.histogram->upper_bounds_ = std::move(upper_bounds);
    s.histogram->counts_.assign(s.histogram->upper_bounds_.size() + 1, 0);
  }
  return *s.histogram;
}

std::string PromRegistry::render() const {
  std::lock_guard lock(mutex_);
  std::string out;
  for (const auto& f : families_) {
    const char* type = f->kind == Kind::Counter ? "counter" : f->kind == Kind::Gauge ? "gauge" : "histogram";
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", f->name, f->help, f->name, type);
    for (const Series& s : f->series) {
      if (s.counter) out += fmt::format("{}_total{} {}\n", f->name, label_text(s.labels), prom_number(s.counter->value_));
      if (s.gauge) out += fmt::format("{}{} {}\n", f->name, label_text(s.labels), prom_number(s.gauge->value_));
      if (const Histogram* h = s.histogram.get()) {
        int64_t cumulative = 0;
        for (size_t b = 0; b <= h->upper_bounds_.size(); ++b) {
          cumulative += h->counts_[b];
          const std::string le = b < h->upper_bounds_.size() ? prom_number(h->upper_bounds_[b]) : "+Inf";
          out += fmt::format("{}_bucket{} {}\n", f->name, label_text(s.labels, le), prom_number(double(cumulative)));
        }
        out += fmt::format("{}_count{} {}\n", f->name, label_text(s.labels), prom_number(double(h->count_)));
        out += fmt::format("{}_sum{} {}\n", f->name, label_text(s.labels), prom_number(h->sum_));
      }
    }
  }
  return out;
}

}  // namespace servesim
