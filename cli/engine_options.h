// Flags of the commands that serve a workload for real with the built-in
// decoder (run, validate): device, model, weights, threads, KV cache memory
// and sampling, with the workload, scheduler and SLO flags of
// common_options.h at CPU-sized defaults.
#pragma once

#include <string>

#include <boost/program_options.hpp>

#include "cli/common_options.h"
#include "engine/decoder_run.h"

namespace servesim::cli {

// Adds --device, --model, --weights, --weights-seed, --threads,
// --kv-cache-memory, --temperature, --top-p, --honor-eos, --dtype,
// --quantization and --kv-cache-dtype to `general`.
void add_engine_options(po::options_description& general);

// Adds --dtype, --quantization and --kv-cache-dtype (run, validate, calibrate).
void add_precision_options(po::options_description& general);

// Adds the draft of a speculative run to `general`: --draft-model,
// --draft-weights, --draft-weights-seed, --self-draft-layers and
// --acceptance-rate (controlled acceptance). The draft length is the
// scheduler's --num-speculative-tokens.
void add_speculative_engine_options(po::options_description& general);

// Workload defaults of a real run: CPU-sized (2 requests/s, 32 requests,
// prompts of 16..256 tokens, outputs of 16..128).
WorkloadDefaults engine_workload_defaults();

// Reads the flags above plus the workload, scheduler and SLO flags (which
// `vm` must hold), and the speculative flags where the command has them.
// Bad values and inconsistent speculative settings throw InputError naming
// the flag.
EngineSetup engine_setup_from(const po::variables_map& vm);

// --dtype, --quantization and --kv-cache-dtype as given (not yet checked
// against a device: DecoderPrecision::on); InputError for a bad name.
DecoderPrecision decoder_precision_from(const po::variables_map& vm);

// "2GiB", "512MiB", "1.5GB", "1000000" (bytes); InputError naming `flag`.
double parse_bytes(const std::string& text, const std::string& flag);

}  // namespace servesim::cli
