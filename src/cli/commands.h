// Each subcommand registers itself on the CLI11 app; main() only dispatches.
// A subcommand is added here when it works, never before.
#pragma once

#include <CLI/CLI.hpp>

namespace fp8lm::cli {

void add_info_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_chat_command(CLI::App& app);
void add_quantize_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_serve_command(CLI::App& app);
// `grammar-worker`: hidden; the server's grammar compilations in a process (grammar_worker_command.cpp).
void add_grammar_worker_command(CLI::App& app);
// `bench throughput`, registered on the `bench` subcommand by add_bench_command.
void add_bench_throughput_command(CLI::App& bench);
void add_bench_structured_command(CLI::App& bench);
// `bench serve` (bench_serve.cpp), registered the same way.
void add_bench_serve_command(CLI::App& bench);
// `bench sweep` and `bench report` (bench_sweep.cpp), registered the same way.
void add_bench_sweep_command(CLI::App& bench);
void add_bench_report_command(CLI::App& bench);

}  // namespace fp8lm::cli
