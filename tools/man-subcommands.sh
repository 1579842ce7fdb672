#!/usr/bin/env bash
# Writes a help2man include file with each subcommand's --help, so that kvtier(1) documents
# every subcommand's options:  man-subcommands.sh KVTIER_BINARY OUTPUT
set -euo pipefail
kvtier=$1
{
  echo "[SUBCOMMAND OPTIONS]"
  for sub in $("$kvtier" --help | sed -n '/^Subcommands:/,$s/^  \([a-z][a-z]*\) .*/\1/p'); do
    echo ".SS \"kvtier $sub\""
    echo ".nf"
    "$kvtier" "$sub" --help | sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"
    echo ".fi"
  done
} >"$2"
