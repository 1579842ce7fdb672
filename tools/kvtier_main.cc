// kvtier: benchmark and inspect KV-cache page stores.
#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "kvtier/backends/builtin.h"
#include "progress.h"
#include "watchdog.h"

namespace {

constexpr const char* kDescription =
    "kvtier: a storage tier for LLM KV-cache pages.\n"
    "Locations are a directory, file:///dir[,/dir2...][?backend=posix&io_threads=N], "
    "mem://name, or s3://bucket/prefix?endpoint=http://host:port&region=R (credentials from "
    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY). bench, verify, ls, gc and clear draw a "
    "progress bar on stderr when it is a terminal (not with --quiet); Ctrl-C stops them "
    "cleanly (bench clears its pages), prints the counts so far and exits with status 130. On a "
    "location that can hang (a "
    "network or FUSE filesystem), stat, ls, verify, gc and clear stop waiting once it has not "
    "answered for --deadline-ms and exit with status 3.";

}  // namespace

int main(int argc, char** argv) {
  using namespace kvtier::cli;
  CLI::App app(kDescription, "kvtier");
  app.require_subcommand(1);
  app.set_version_flag("--version", "kvtier " KVTIER_VERSION);

  BenchOptions bench;
  CLI::App* b = app.add_subcommand(
      "bench",
      "Write N pages, read them back, verify every byte; print throughput, batch latency "
      "percentiles, the backend chosen and open descriptors before/after. Throughput counts "
      "time inside store calls only (with --in-flight, first submission to last completion); "
      "the timed reads check each piece's stamp (page and run), then an untimed pass reads "
      "every page again and compares every byte. The host pool is registered once and warmed "
      "up first, as in a serving engine.");
  auto* dir_opt = b->add_option("--dir", bench.dir,
                                "Directory to bench in (default: $TMPDIR/kvtier-bench, or "
                                "./kvtier-bench without TMPDIR)");
  b->add_option("--uri", bench.uri, "Store location URI instead of --dir")->excludes(dir_opt);
  auto* model_opt =
      b->add_option("--model", bench.model,
                    "Page shape of a model, 64 tokens per page, BF16: llama3-8b (2 x 4 MiB), "
                    "qwen2.5-72b-tp8 (2 x 1.25 MiB), deepseek-v3 (1 x 4,497,408 B). Default "
                    "llama3-8b")
          ->check(CLI::IsMember({"llama3-8b", "qwen2.5-72b-tp8", "deepseek-v3"}));
  b->add_option("--page-bytes", bench.page_bytes, "Pages of one piece of N bytes instead")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 34))
      ->excludes(model_opt);
  b->add_option("--pages", bench.pages, "Pages to write and read")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 24))
      ->capture_default_str();
  b->add_option("--batch", bench.batch, "Pages per batch call")
      ->check(CLI::Range(uint64_t{1}, uint64_t{4096}))
      ->capture_default_str();
  b->add_option("--threads", bench.threads, "Client threads issuing batches concurrently")
      ->check(CLI::Range(uint64_t{1}, uint64_t{256}))
      ->capture_default_str();
  b->add_option("--in-flight", bench.in_flight,
                "Batches each client thread keeps in flight with the async API (submit_put/"
                "submit_get), resubmitting each as soon as it is done; 1: one blocking call at a "
                "time. Timed from first submission to last completion")
      ->check(CLI::Range(uint64_t{1}, uint64_t{64}))
      ->capture_default_str();
  b->add_option("--pool-pages", bench.pool_pages,
                "Host pool pages per batch in flight (rounded up to whole batches), batches "
                "taking turns through them, as through a serving engine's pool; default: one "
                "batch's worth, reused by every batch (small pages then stay in the CPU's "
                "caches)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{16777216}));
  std::vector<std::string> backends = kvtier::builtin_backends().names();
  backends.insert(backends.begin(), "auto");
  b->add_option("--backend", bench.backend,
                "Backend (default auto: uring where io_uring works, else posix)")
      ->check(CLI::IsMember(backends));
  b->add_option("--io-threads", bench.io_threads, "Backend I/O threads (0: automatic)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{64}));
  b->add_option("--direct-io", bench.direct_io,
                "Direct I/O: off, auto (aligned pages only) or on (unaligned pages staged)")
      ->check(CLI::IsMember({"off", "auto", "on"}))
      ->capture_default_str();
  b->add_option("--layout", bench.layout,
                "FILE layout: files (one file per page), segments (pages appended to large "
                "segment files) or auto (what the namespace holds, else segments below 4 MiB "
                "pages); default: the URI's, else auto")
      ->check(CLI::IsMember({"files", "segments", "auto"}));
  b->add_option("--segment-lanes", bench.segment_lanes,
                "Segments: segment files each base is appended to side by side, windows over "
                "1 MiB dealt to them in 1 MiB runs (0: one per hardware thread, at most 4)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{64}))
      ->capture_default_str();
  b->add_flag("--fsync", bench.fsync,
              "Make every page durable before a put returns (files: each page file and its "
              "directory entry; segments: a batch's records, then their summary entries)");
  b->add_flag("--skip-payload-checksum", bench.skip_payload_checksum,
              "Read without checking payload checksums (headers are still checked): only to "
              "measure what verification costs; the bench still compares every byte");
  b->add_flag("--keep", bench.keep, "Keep the pages (for kvtier stat/verify) instead of clearing");
  b->add_flag("--json", bench.json, "Print one JSON object");
  b->add_flag("--quiet", bench.quiet,
              "No progress bar (one is drawn on stderr only when it is a terminal)");
  b->add_option("--capacity", bench.capacity,
                "Bound the store to BYTES (least recently used pages evicted; segments: whole "
                "sealed segments reclaimed, oldest first); pages evicted "
                "before the read phase count as misses, apart from corruption")
      ->transform(CLI::AsSizeValue(/*kb_is_1000=*/true))
      ->check(CLI::Range(uint64_t{1}, UINT64_MAX));
  b->add_option("--deadline-ms", bench.deadline_ms,
                "Longest a call waits for a location that can hang; later pages are misses "
                "(0: no deadline; default: the URI's deadline_ms, else 10000)");
  b->add_option("--isolate", bench.isolate,
                "Run the I/O on the store's own threads through staging, so that calls return "
                "by their deadline: auto (network and FUSE filesystems), on or off; default: "
                "the URI's isolate, else auto")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  b->add_option("--key-file", bench.key_file,
                "Seal every page (AES-256-GCM) under the keys in FILE: lines of \"<key id> <64 "
                "hex digits>\", the first current, owner-only (default: $KVTIER_KEY_FILE when "
                "set, else pages in the clear; docs/security.md)");
  b->add_option("--tenant", bench.tenant,
                "Whose keys seal the pages (default: the URI's tenant=, else \"default\"); "
                "needs a key file");

  // The tenant options of every command that reads pages.
  auto tenant_options = [](CLI::App* cmd, InspectOptions& o, const char* what) {
    cmd->add_option(
        "--key-file", o.key_file,
        fmt::format("Read as a tenant: {}, with the keys in FILE (docs/security.md)", what));
    cmd->add_option("--tenant", o.tenant,
                    "The tenant whose keys read (default: \"default\"); without --key-file, "
                    "the key file $KVTIER_KEY_FILE names");
  };

  // The deadline of every command that inspects or maintains a location.
  auto deadline_option = [](CLI::App* cmd, InspectOptions& o) {
    cmd->add_option(
        "--deadline-ms", o.deadline_ms,
        "On a location that can hang: stop waiting once it has not answered for MS (its "
        "directories are asked every quarter of it), print why and exit with status 3; a "
        "removal under way ends on its own once it answers (0: no deadline; default: the "
        "URI's deadline_ms, else 10000)");
  };

  InspectOptions stat;
  CLI::App* s = app.add_subcommand(
      "stat", "Pages, bytes, namespaces and leftover temporaries of a store location");
  s->add_option("location", stat.location, "Directory or URI")->required();
  s->add_flag("--json", stat.json, "Print one JSON object");
  s->add_flag("--prometheus", stat.prometheus, "Print Prometheus text (gauges per namespace)");
  deadline_option(s, stat);
  tenant_options(s, stat, "also count the tenant's pages, by key id");

  InspectOptions verify;
  CLI::App* v = app.add_subcommand(
      "verify",
      "Check every page (header, checksum, size, placement). Exit 0: all intact; 1: corrupt "
      "pages found (each listed); 2: usage or open error");
  v->add_option("location", verify.location, "Directory or URI")->required();
  v->add_flag("--json", verify.json, "Print one JSON object");
  v->add_flag("--repair", verify.repair, "Remove the corrupt pages found");
  deadline_option(v, verify);
  tenant_options(v, verify,
                 "also open every chunk of the tenant's sealed pages (each tag checked)");
  v->add_flag("--quiet", verify.quiet,
              "No progress bar (one is drawn on stderr only when it is a terminal)");

  InspectOptions ls;
  CLI::App* l = app.add_subcommand("ls", "List pages: namespace, key hash, bytes, path");
  l->add_option("location", ls.location, "Directory or URI")->required();
  l->add_option("--namespace", ls.namespace_prefix, "Only namespaces whose id starts with this");
  l->add_flag("--json", ls.json, "Print one JSON array");
  deadline_option(l, ls);
  tenant_options(l, ls, "list the tenant's pages alone, with their key ids");
  l->add_flag("--quiet", ls.quiet,
              "No progress bar (one is drawn on stderr only when it is a terminal)");

  InspectOptions gc;
  CLI::App* g = app.add_subcommand(
      "gc",
      "Remove least recently written pages until the location holds at most --to bytes, and "
      "the temporaries no writer will publish");
  g->add_option("location", gc.location, "Directory or URI")->required();
  g->add_option("--to", gc.to_bytes, "Bytes to keep at most")
      ->transform(CLI::AsSizeValue(/*kb_is_1000=*/true))
      ->required();
  g->add_option("--temp-age", gc.temp_age_s,
                "Remove temporaries older than this many seconds (writers on other hosts), and "
                "any whose writer on this host is gone; and segments no summary names older "
                "than this")
      ->capture_default_str();
  g->add_option("--retire-key-id", gc.retire_key_ids,
                "Also remove every sealed page sealed under this key id (repeatable): the "
                "pages of a key taken out of the key file (the id is in each page's header; "
                "no key is needed); with a --to as large as the location, nothing else goes")
      ->check(CLI::Range(uint32_t{1}, UINT32_MAX));
  g->add_flag("--json", gc.json, "Print one JSON object");
  deadline_option(g, gc);
  tenant_options(g, gc, "--to bounds the tenant's pages alone, and only they are removed by it");
  g->add_flag("--quiet", gc.quiet,
              "No progress bar (one is drawn on stderr only when it is a terminal)");

  InspectOptions clear;
  CLI::App* c = app.add_subcommand("clear", "Remove every page of one namespace");
  c->add_option("location", clear.location, "Directory or URI")->required();
  c->add_option("--namespace", clear.namespace_prefix, "Namespace id (or a unique prefix)")
      ->required();
  deadline_option(c, clear);
  tenant_options(c, clear, "remove the tenant's pages of the namespace alone");
  c->add_flag("--quiet", clear.quiet,
              "No progress bar (one is drawn on stderr only when it is a terminal)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    (void)app.exit(e);
    return kExitUsage;
  }
  // Ctrl-C stops bench, verify, ls, gc and clear cleanly (exit 130), see progress.h.
  catch_interrupts();
  if (b->parsed()) return run_bench(bench);
  // On a location that can hang, each runs where the CLI can stop waiting for it (watchdog.h).
  auto watched = [](const char* name, const InspectOptions& o, int (*run)(const InspectOptions&)) {
    return run_watched(name, o.location, o.deadline_ms, [&] { return run(o); });
  };
  if (s->parsed()) return watched("stat", stat, run_stat);
  if (v->parsed()) return watched("verify", verify, run_verify);
  if (l->parsed()) return watched("ls", ls, run_ls);
  if (g->parsed()) return watched("gc", gc, run_gc);
  if (c->parsed()) return watched("clear", clear, run_clear);
  return kExitUsage;
}
