// Package dryrunfixture is a stand-in end-to-end test for the dry run of
// tools/bazelcheck: its TestBazelInputs finds an input the way the e2e
// tests do (e2e/harness/testinputs) and, when DRYRUN_FIXTURE_RUNS_GO is 1,
// also runs the go command, as the e2e tests did before Bazel gave them
// their inputs, so that the dry run's tests can show that it catches that.
package dryrunfixture
