// Package tryit keeps the README's "Try it on one machine" section true: its
// test installs the commands with go install and runs every line of the
// section's shell block, in a network namespace of its own so that the
// addresses and ports the README uses are free. It has no code of its own.
package tryit
