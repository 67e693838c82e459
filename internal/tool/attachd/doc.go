// Package attachd is roced's side of sharing an address (the protocol is
// package internal/core/attach; the steering, package link/steer).
//
// A Server listens on the attach socket, with the mode and group that
// decide who may attach. Share makes one steered group per address; block
// 0 is roced's own device (QP1, the CM, its responders) and StartCM puts
// the Router on its QP1. Each attaching process gets the next block that has
// been free for Quarantine, the block's socket (locked against attaching a
// program), and a Port on the Router for its CM MADs. A process's session
// ending releases all of it (leave).
//
// Every drainEvery tick the Server polices each group (the steering program
// attached again; a process that connected its socket has the connect
// undone and its session ended) and reads every free block's socket empty,
// counting what it finds and what the kernel dropped for it as datagrams no
// process owned (Device.Drops).
//
// Quotas (Config.Quota) bound the QPs, MRs and listeners of one uid over
// all its processes; a process asks before it creates (Charge) and roced
// counts listeners itself (Claim). MaxClients bounds the processes attached
// at once.
package attachd
