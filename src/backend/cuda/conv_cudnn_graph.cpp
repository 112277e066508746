// The cuDNN convolution kernel's graph API and the `auto` policy (conv_cudnn.hpp): the direction's
// problem in graph terms, plans from the caches or a search, the fallback to the legacy API where
// the graph API has no engine, and auto's costing of find's algorithm against graph_find's plan.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/conv_cudnn.hpp"
#include "core/errors.hpp"

namespace cnnergy::cuda {

GraphConvProblem CudnnConv::graph_problem(Dir dir, float beta) const {
  GraphConvProblem p;
  p.dir = dir;
  p.data_type = cudnn_dtype(dtype_);
  p.nhwc = layout_ == Layout::kNHWC;
  p.allow_tf32 = ctx_->options().allow_tf32;
  p.n = d_.n, p.c = d_.c, p.h = in_h_, p.w = in_w_;
  p.k = d_.k, p.c_per_group = d_.c / d_.groups, p.r = d_.r, p.s = d_.s;
  p.out_h = d_.out_h(), p.out_w = d_.out_w();
  p.pad_h = explicit_pad_ ? 0 : d_.pad_top, p.pad_w = explicit_pad_ ? 0 : d_.pad_left;
  p.stride_h = d_.stride_h, p.stride_w = d_.stride_w;
  p.dilation_h = d_.dilation_h, p.dilation_w = d_.dilation_w;
  p.beta = beta;
  return p;
}

// The graph-API plan of one direction and beta, from the backend's cache or a search (`find`:
// the fastest of the candidates, for graph_find and auto; otherwise the top-ranked engine, for
// graph_heuristic). Where the graph API has nothing to run, the legacy counterpart takes the
// direction over with a note, or NotSupported when fallback is off.
void CudnnConv::use_graph(Dir dir, bool find, const void* in1, const void* in2, void* out,
                          float beta) const {
  std::string why;
  std::shared_ptr<const GraphConvPlan> plan = graph_search(dir, find, in1, in2, out, beta, why);
  if (!plan) {
    const std::string legacy = find ? "find" : "heuristic";
    if (!ctx_->options().conv_algo_fallback)
      throw NotSupported("conv2d " + shape_text() + ": cuDNN's graph API cannot run the " +
                         direction_name(dir) + " (" + why + "); use the " + legacy +
                         " policy or allow fallback");
    notes_.push_back(std::string(direction_name(dir)) + ": graph API unusable for " + shape_text() +
                     " (" + why + "); the legacy " + legacy + " policy runs it");
    policy_[index(dir)] = legacy;
    plan_[index(dir)] = Plan{};
    ensure_resolved(dir, in1, in2, out, beta);
    return;
  }
  adopt_graph(dir, beta, plan);
}

std::vector<std::string> CudnnConv::graph_engine_names(Dir dir) const {
  std::vector<std::string> names;
  for (const std::string& tag : graph_conv_engine_tags(ctx_->cudnn(), graph_problem(dir, 0.0f),
                                                       ctx_->options().workspace_limit_bytes))
    names.push_back(kGraphEnginePrefix + tag);
  return names;
}

void CudnnConv::use_graph_engine(Dir dir, const std::string& tag, float beta) const {
  std::shared_ptr<const GraphConvPlan> plan = graph_conv_plan_from_tag(
      ctx_->cudnn(), graph_problem(dir, beta), tag, ctx_->options().workspace_limit_bytes);
  if (!plan)
    throw NotSupported("conv2d " + shape_text() + ": graph engine " + tag + " cannot run the " +
                       direction_name(dir) + (beta != 0.0f ? " (accumulating)" : "") +
                       " here: it does not finalize, breaks the run's numerics, compiles at run "
                       "time or needs more than the workspace cap of " +
                       format_bytes(ctx_->options().workspace_limit_bytes) +
                       " (cnnergy convbench --graph-engines all lists those that run)");
  adopt_graph(dir, beta, std::move(plan));
}

void CudnnConv::adopt_graph(Dir dir, float beta, std::shared_ptr<const GraphConvPlan> plan) const {
  Plan& p = plan_[index(dir)];
  if (!p.graph || beta == 0.0f) p.engine = plan->engine();
  p.resolved = p.graph = true;
  p.workspace_bytes = std::max(p.workspace_bytes, plan->workspace_bytes());
  graph_[index(dir)][beta != 0.0f] = GraphConvLaunch(std::move(plan));
}

// The graph plan from the backend's cache or a search; null (with the reason) where none runs.
std::shared_ptr<const GraphConvPlan> CudnnConv::graph_search(Dir dir, bool find, const void* in1,
                                                             const void* in2, void* out, float beta,
                                                             std::string& why) const {
  const std::size_t limit = ctx_->options().workspace_limit_bytes;
  const GraphConvProblem problem = graph_problem(dir, beta);
  const std::size_t ranked = find ? ctx_->options().conv_search_candidates : 1;
  const std::size_t fallback = find ? kFallbackCandidates : 0;
  const std::string key = problem.key() + ",search" + std::to_string(ranked) + "+" +
                          std::to_string(fallback) + ",ws" + std::to_string(limit);
  std::shared_ptr<const GraphConvPlan> plan;
  if (auto hit = ctx_->graph_plan_cache().lookup(key)) return *hit;
  AlgoCache* persistent = ctx_->algo_cache();
  const ConvProblemKey pkey = problem_key(dir, find ? "graph_find" : "graph_heuristic", beta,
                                          static_cast<std::int64_t>(ranked + fallback));
  if (persistent)
    if (auto d = persistent->lookup(pkey); d && d->kind == "graph") {
      // Rebuilt from the engine and its knobs, and validated as a search would validate it.
      plan = graph_conv_plan_from_tag(ctx_->cudnn(), problem, d->engine, limit);
      if (plan) {
        ctx_->graph_plan_cache().insert(key, plan);
        ctx_->search_clock().count_cached();
        return plan;
      }
      persistent->forget(pkey);  // the engine no longer finalizes here: searched again below
    }
  // The accumulating plan (beta 1) of a problem whose overwriting plan was found: the same engine
  // with its knobs (the kernel differs only in its epilogue), rebuilt and validated, not searched.
  if (find && beta != 0.0f) {
    const std::string overwrite_key =
        graph_problem(dir, 0.0f).key() + key.substr(problem.key().size());
    if (auto overwriting = ctx_->graph_plan_cache().lookup(overwrite_key))
      plan = graph_conv_plan_from_tag(ctx_->cudnn(), problem, (*overwriting)->engine(), limit);
  }
  if (!plan) {
    ConvSearchClock::Scope timed(ctx_->search_clock(),
                                 std::string(direction_name(dir)) + " " + shape_text());
    std::size_t skipped = 0;
    const std::string traced = std::string(direction_name(dir)) + " " + shape_text();
    auto stage = ConvSearchClock::Clock::now();
    auto candidates =
        graph_conv_candidates(ctx_->cudnn(), problem, limit, ranked, fallback, &skipped);
    ConvSearchClock::trace("graph:plans", traced, stage,
                           std::to_string(candidates.size()) + " finalized, " +
                               std::to_string(skipped) + " left out");
    stage = ConvSearchClock::Clock::now();
    if (candidates.empty())
      why = "no engine within " + format_bytes(limit) + " of workspace keeps the run's numerics (" +
            std::to_string(skipped) + " configurations left out)";
    else if (!find)
      plan = candidates.front();
    else if (!(plan = time_graph_candidates(dir, candidates, in1, in2, out)))
      why = "none of the " + std::to_string(candidates.size()) + " candidate engines ran";
    if (find && !candidates.empty()) ConvSearchClock::trace("graph:timing", traced, stage);
    if (plan) ctx_->graph_plan_cache().store(key, plan);
  } else {
    ctx_->graph_plan_cache().insert(key, plan);
  }
  if (plan && persistent) {
    AlgoDecision d;
    d.kind = "graph";
    d.engine = plan->engine();
    d.workspace_bytes = plan->workspace_bytes();
    persistent->record(pkey, d);
  }
  return plan;
}

// "auto": the legacy find's algorithm against graph_find's plan, each costed as its device time
// plus the host time of one call (the legacy API re-derives its kernel per call, which a small
// batch cannot hide), measured on the same operands; the cheaper runs the direction (both
// betas), and identical problems reuse the decision.
void CudnnConv::use_auto(Dir dir, const void* in1, const void* in2, void* out, float beta) const {
  const std::string key = "auto," + cache_key(dir);
  if (auto graph_won = ctx_->auto_choice_cache().lookup(key)) {
    if (*graph_won)
      use_graph(dir, /*find=*/true, in1, in2, out, beta);
    else
      use_find(dir, in1, in2, out);
    return;
  }
  // The verdict is the same for both betas: keyed at beta 0.
  AlgoCache* persistent = ctx_->algo_cache();
  const ConvProblemKey pkey = problem_key(
      dir, "auto", 0.0f, static_cast<std::int64_t>(ctx_->options().conv_search_candidates));
  if (persistent)
    if (auto d = persistent->lookup(pkey); d && d->kind == "choice") {
      // Each side validates its own entry (and searches again where that fails).
      ctx_->auto_choice_cache().insert(key, d->graph_won);
      ctx_->search_clock().count_cached();
      if (d->graph_won)
        use_graph(dir, /*find=*/true, in1, in2, out, beta);
      else
        use_find(dir, in1, in2, out);
      return;
    }
  ConvSearchClock::Scope timed(ctx_->search_clock(),
                               std::string(direction_name(dir)) + " " + shape_text());
  const std::string traced = std::string(direction_name(dir)) + " " + shape_text();
  auto stage = ConvSearchClock::Clock::now();
  use_find(dir, in1, in2, out);  // plan_ now holds the legacy algorithm
  ConvSearchClock::trace("auto:find", traced, stage, conv_algo_name(dir, plan_[index(dir)].algo));
  stage = ConvSearchClock::Clock::now();
  std::string why;
  auto plan = graph_search(dir, /*find=*/true, in1, in2, out, beta, why);
  ConvSearchClock::trace("auto:graph_find", traced, stage, plan ? plan->engine() : why);
  stage = ConvSearchClock::Clock::now();
  bool graph_won = false;
  std::string cost_note;
  LaunchCost winner;
  if (plan) {
    std::vector<std::shared_ptr<Buffer>> held;
    const std::array<void*, 3> o = search_operands(dir, in1, in2, out, held);
    // Scratch workspace: the shared one grows only for what is adopted.
    const std::size_t legacy_ws = plan_[index(dir)].workspace_bytes;
    auto ws = ctx_->search_scratch(std::max(legacy_ws, plan->workspace_bytes()));
    const LaunchCost legacy = launch_cost(
        ctx_->stream(), [&] { return launch(dir, o[0], o[1], o[2], beta, ws->data(), legacy_ws); });
    GraphConvLaunch g(plan);
    const LaunchCost graph = launch_cost(ctx_->stream(), [&] {
      return g.execute(ctx_->cudnn(), operands_by_role(dir, o[0], o[1], o[2], ws->data()));
    });
    graph_won = graph.total_ms() < legacy.total_ms();
    cost_note = "graph " + std::to_string(graph.device_ms) + " + " + std::to_string(graph.host_ms) +
                " ms host vs legacy " + std::to_string(legacy.device_ms) + " + " +
                std::to_string(legacy.host_ms) + " ms host";
    winner = graph_won ? graph : legacy;
    ConvSearchClock::trace("auto:costing", traced, stage, cost_note);
  }
  ctx_->auto_choice_cache().store(key, graph_won);
  if (persistent) {
    AlgoDecision d;
    d.kind = "choice";
    d.graph_won = graph_won;
    d.workspace_bytes = graph_won ? plan->workspace_bytes() : plan_[index(dir)].workspace_bytes;
    if (plan) d.device_ms = winner.device_ms, d.host_ms = winner.host_ms;
    d.note = plan ? cost_note : "graph API: " + why;
    persistent->record(pkey, d);
  }
  if (graph_won) {
    plan_[index(dir)] = Plan{};  // the legacy algorithm's workspace is not the plan's
    adopt_graph(dir, beta, plan);
  }
}

// graph_find's timing: on the caller's operands where given (see search_operands), within the
// largest workspace the candidates need that can be had (the hungriest are dropped otherwise).
std::shared_ptr<const GraphConvPlan> CudnnConv::time_graph_candidates(
    Dir dir, std::vector<std::shared_ptr<const GraphConvPlan>> candidates, const void* in1,
    const void* in2, void* out) const {
  std::vector<std::shared_ptr<Buffer>> held;
  const std::array<void*, 3> operands = search_operands(dir, in1, in2, out, held);
  std::shared_ptr<Buffer> ws;
  while (!candidates.empty()) {
    std::size_t need = 0;
    for (const auto& c : candidates) need = std::max(need, c->workspace_bytes());
    try {
      ws = ctx_->search_scratch(need);
      break;
    } catch (const OutOfMemory&) {
      candidates.erase(std::remove_if(candidates.begin(), candidates.end(),
                                      [&](const auto& c) { return c->workspace_bytes() == need; }),
                       candidates.end());
    }
  }
  if (candidates.empty()) return nullptr;
  return fastest_graph_conv(
      ctx_->cudnn(), ctx_->stream(), candidates,
      operands_by_role(dir, operands[0], operands[1], operands[2], ws->data()));
}

}  // namespace cnnergy::cuda
