// `fp8lm grammar-worker`: the server's grammar compilations in a process of their own
// (structured/compile_worker.h), started by `fp8lm serve` re-executing this binary — never by
// hand, so it is not in --help. It reads requests from its stdin, a socket the server holds the
// other end of, and writes its replies there; a terminal there is someone who typed the command.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/error.h"
#include "structured/compile_worker.h"

namespace fp8lm::cli {

void add_grammar_worker_command(CLI::App& app) {
  auto config = std::make_shared<structured::CompileWorkerConfig>();
  auto tokenizer_json = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("grammar-worker", "internal: `fp8lm serve`'s grammar compilations");
  cmd->group("");  // hidden
  cmd->add_option("--tokenizer-json", *tokenizer_json, "the served model's tokenizer.json")->required();
  cmd->add_option("--vocab-size", config->vocab_size, "the model's vocabulary size")->required()->check(CLI::PositiveNumber);
  cmd->add_option("--eos-ids", config->eos_ids, "the model's EOS ids")->delimiter(',');
  cmd->add_option("--memory-mib", config->memory_mib, "what one compilation may take")
      ->required()
      ->check(CLI::Range(structured::kMinWorkerMemoryMib, structured::kMaxWorkerMemoryMib));
  cmd->callback([config, tokenizer_json] {
    if (::isatty(STDIN_FILENO))
      throw Error("grammar-worker is started by `fp8lm serve` (its stdin is the server's socket), not by hand");
    config->tokenizer_json = *tokenizer_json;
    const int status = structured::run_compile_worker(*config, STDIN_FILENO);
    std::fflush(nullptr);
    if (status != 0) throw CLI::RuntimeError(status);  // main() returns it, printing nothing
  });
}

}  // namespace fp8lm::cli
