# shellcheck shell=bash
# evaluation/engine.sh: the ENGINE knob of inference/ and evaluation/ (sourced, not run; needs scripts/knobs.sh).
# ENGINE names the serving engine as evaluation/serve_model.sh does (vllm, llamacpp; also sglang, or openai for
# any other OpenAI-compatible server); afm speaks that engine's dialect (afm.agent.engines: where the sampled ids
# and stop strings come back). Unset or auto: afm asks the server. Only BACKEND=openai talks to a server.

# afm_engine_arg: the value of --engine for ENGINE, or nothing (auto, or BACKEND=hf); stops on an unknown engine.
afm_engine_arg() {
  local engine=${ENGINE:-auto}
  case $engine in
    auto | vllm | sglang | llamacpp | openai) ;;
    *) afm_die "ENGINE must be auto, vllm, sglang, llamacpp or openai (got '$engine')" ;;
  esac
  # BACKEND unset is afm's default backend, openai
  [[ ${BACKEND:-} != hf && $engine != auto ]] && printf '%s' "$engine"
  return 0
}
