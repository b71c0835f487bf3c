// Metrics in the Prometheus text exposition format (version 0.0.4): counters,
// gauges and histograms with fixed label sets, rendered on each scrape of
// /metrics. Thread-safe: the engine thread records, the HTTP thread renders.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace servesim {

// Label name -> value, rendered in name order as prometheus_client does.
using PromLabels = std::map<std::string, std::string>;

class PromRegistry {
 public:
  class Counter {
   public:
    void inc(double by = 1.0);
    double value() const;
   private:
    friend class PromRegistry;
    PromRegistry* owner_ = nullptr;
    double value_ = 0;
  };
  class Gauge {
   public:
    void set(double v);
    double value() const;
   private:
    friend class PromRegistry;
    PromRegistry* owner_ = nullptr;
    double value_ = 0;
  };
  class Histogram {
   public:
    void observe(double v);
    int64_t count() const;
    double sum() const;
   private:
    friend class PromRegistry;
    PromRegistry* owner_ = nullptr;
    std::vector<double> upper_bounds_;  // ascending, without +Inf
    std::vector<int64_t> counts_;       // per bucket (not cumulative), + one for +Inf
    int64_t count_ = 0;
    double sum_ = 0;
  };

  // A family's samples are named `name` (gauge), `name_total` (counter) or
  // `name_bucket/_count/_sum` (histogram); each labels set is one series.
  Counter& counter(const std::string& name, const std::string& help, const PromLabels& labels);
  Gauge& gauge(const std::string& name, const std::string& help, const PromLabels& labels);
  Histogram& histogram(const std::string& name, const std::string& help, const PromLabels& labels,
                       std::vector<double> upper_bounds);

  // The text exposition of every series, families in registration order.
  std::string render() const;

 private:
  enum class Kind { Counter, Gauge, Histogram };
  struct Series {
    PromLabels labels;
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
  };
  struct Family {
    std::string name, help;
    Kind kind;
    std::vector<Series> series;
  };
  Family& family(const std::string& name, const std::string& help, Kind kind);
  Series& series(Family& f, const PromLabels& labels);

  mutable std::mutex mutex_;  // guards every value and the families
  std::vector<std::unique_ptr<Family>> families_;
};

// A number as Prometheus writes it: "+Inf", integers without a fraction,
// others with enough digits to read back exactly.
std::string prom_number(double v);

}  // namespace servesim
