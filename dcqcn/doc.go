// Package dcqcn is RoCEv2 congestion control as ConnectX NICs run it: DCQCN
// (Zhu et al., "Congestion Control for Large-Scale RDMA Deployments",
// SIGCOMM 2015) with the parameters, units and defaults of the mlx5 ECN
// settings. It is pure: no I/O, no goroutines, no clock of its own. The
// caller passes the time into every method, so the engine drives it from
// its shard timers and tests drive it with any sequence of instants.
//
// # The three roles
//
// A switch (the congestion point) marks ECN-capable packets CE when its
// queue builds. The receiver's QP (the notification point, NP) answers a
// CE-marked packet with a CNP to the QP that sent it, at most one per
// min_time_between_cnps. The sender's QP (the reaction point, RP) cuts its
// rate on each CNP and raises it again while none arrive. Data packets
// carry ECT(0) only when congestion control is on (DataTOS); CNPs carry
// cnp_dscp and Not-ECT (Params.CNPTOS).
//
// # Reaction point (RP)
//
// A QP starts unlimited. The first CNP allocates a rate limiter: current
// rate Rc and target rate Rt start at rate_to_set_on_first_cnp (0: the line
// rate) and α at initial_alpha_value, and that CNP cuts at once. After that:
//
//   - α (units of 1/1024) is updated every dce_tcp_rtt µs:
//     α ← α·g/1024 + (1024−g) if a CNP arrived in the period, else α·g/1024,
//     with g = dce_tcp_g.
//   - A cut happens at the start of the rate_reduce_monitor_period after a
//     CNP, at most one per period: Rt ← Rc (see clamp_tgt_rate), then
//     Rc ← Rc·(1 − α/2^rpg_gd), but never below rpg_min_dec_fac % of Rc nor
//     below rpg_min_rate. The increase counters restart.
//   - Rate increase events come from a timer (every rpg_time_reset µs, T
//     counts them) and a byte counter (every rpg_byte_reset bytes sent, BC
//     counts them), both since the last cut. With F = rpg_threshold, each
//     event is fast recovery while max(T, BC) ≤ F (Rt unchanged), hyper
//     increase once min(T, BC) > F (Rt += i·rpg_hai_rate, i = min(T, BC) − F),
//     and additive increase otherwise (Rt += rpg_ai_rate); then
//     Rc ← (Rc + Rt)/2.
//   - When Rc reaches rpg_max_rate (0: the line rate) the limiter is
//     released: the QP is unlimited again and the next CNP starts over.
//
// α is computed lazily from its period grid, so a QP needs no wake-up every
// microsecond; RP.NextEvent gives the next cut or timer increase.
//
// # Parameters
//
// Field (mlx5 name), unit, default (ConnectX firmware):
//
//	ClampTgtRate             clamp_tgt_rate                 bool    false
//	ClampTgtRateAfterTimeInc clamp_tgt_rate_after_time_inc  bool    true
//	RPGTimeReset             rpg_time_reset                 µs      300
//	RPGByteReset             rpg_byte_reset                 bytes   32767 (0: off)
//	RPGThreshold             rpg_threshold                  events  1
//	RPGMaxRate               rpg_max_rate                   Mb/s    0 (line rate)
//	RPGAIRate                rpg_ai_rate                    Mb/s    5
//	RPGHAIRate               rpg_hai_rate                   Mb/s    50
//	RPGGD                    rpg_gd                         log2    11
//	RPGMinDecFac             rpg_min_dec_fac                %       50
//	RPGMinRate               rpg_min_rate                   Mb/s    1
//	RateToSetOnFirstCNP      rate_to_set_on_first_cnp       Mb/s    0 (line rate)
//	DCETCPG                  dce_tcp_g                      1/1024  1019
//	DCETCPRTT                dce_tcp_rtt                    µs      1
//	RateReduceMonitorPeriod  rate_reduce_monitor_period     µs      4
//	InitialAlphaValue        initial_alpha_value            1/1024  1023
//	MinTimeBetweenCNPs       min_time_between_cnps          µs      4
//	CNPDSCP                  cnp_dscp                       DSCP    48
//	CNP802pPrio              cnp_802p_prio                  PCP     6
//
// Each field's documentation says what it does. The NP limit is per QP.
//
// # Pacing
//
// Pacer is a per-QP token bucket: Ready(now) says whether a packet may go
// now or when one may, Sent(n) charges it. The engine's shard asks it
// before each request packet and arms its existing timer for the time it
// returns, so nothing sleeps and nothing runs per QP.
package dcqcn
