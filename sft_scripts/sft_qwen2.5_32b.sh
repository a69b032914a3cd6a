#!/usr/bin/env bash
# Moved: the SFT scripts are now one per agent, as in the original project, each with its own learning rate,
# warmup, batch, epochs and cutoff (one script for every task trained every task with the web agent's values).
# Use:
#   bash sft_scripts/web_agent/sft_qwen2.5_32b.sh
#   bash sft_scripts/code_agent/sft_qwen2.5_32b.sh
# This file only says so (and exits 2), so that an old command line cannot train with another task's defaults.
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
afm_moved_script sft_scripts/sft_qwen2.5_32b.sh "$@"
