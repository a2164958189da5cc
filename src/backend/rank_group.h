// The ranks of a tensor-parallel group (issue 22) and the transport they share, as the runtime
// sees them: it asks the group for each rank's backend and, should a rank fail mid-step, stops
// the others. Each backend makes its own (backend/factory/make_ops.h: make_rank_group).
#pragma once

#include <memory>
#include <string>

#include "backend/ops.h"

namespace fp8lm::backend {

class RankGroup {
 public:
  virtual ~RankGroup() = default;
  virtual int size() const = 0;
  // Rank `rank`'s backend, joined to the group. Called by every rank at once, each from the
  // thread that will run it (NCCL makes its communicator collectively; a CUDA thread has a device).
  virtual std::unique_ptr<Ops> make_rank(int rank) = 0;
  // After one rank failed mid-step: every rank waiting in a collective, and every later
  // collective, fails instead of waiting for it for ever. Callable from any thread.
  virtual void abort(const std::string& why) = 0;
};

}  // namespace fp8lm::backend
