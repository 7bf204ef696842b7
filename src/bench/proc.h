// Child processes and cleanup for the benchmark: servers and scripts it starts, and the actions
// that undo what it set up (local cluster, peers, network namespaces), run in reverse order at
// exit, on error and on SIGINT/SIGTERM. Thread-safety: all functions may be called from any
// thread.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "ciuic/status.h"

namespace ciuic::bench {

// Starts `argv` (argv[0] is a path or a name on PATH) in its own session with stdin from
// /dev/null and stdout/stderr appended to `log_path`, with `env` ("K=V") added. Returns its pid.
Result<pid_t> Spawn(const std::vector<std::string>& argv,
                    const std::string& log_path,
                    const std::vector<std::string>& env = {});

// Runs `argv` to completion (see Spawn); returns its exit code (128+signal when killed).
// kTimedOut (after killing it) when it runs longer than `timeout_s`.
Result<int> RunCommand(const std::vector<std::string>& argv,
                       const std::string& log_path,
                       int timeout_s,
                       const std::vector<std::string>& env = {});

// Sends SIGTERM, waits up to `timeout_ms`, then SIGKILL, and reaps `pid`.
void StopProcess(pid_t pid, int timeout_ms = 5000);

// Registers `fn` to run at cleanup; returns a handle for RemoveCleanup.
int AddCleanup(std::function<void()> fn);
// Runs and forgets the cleanup `id` now (no-op if already run).
void RunCleanup(int id);
// Runs every registered cleanup, newest first.
void RunAllCleanups();
// Blocks SIGINT and SIGTERM in the calling thread (call first in main, before any thread
// starts, so every thread inherits the mask) and starts a thread that, on either signal, prints
// a line, runs every cleanup and exits with 128 + signal.
void InstallSignalCleanup();

// Directory of the running executable.
std::string SelfDir();
// Last `n` non-empty lines of a file, joined with " | " (for error messages about a log).
std::string LastLines(const std::string& path, int n);

}  // namespace ciuic::bench
