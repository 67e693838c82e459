# gnuplot script for one ccsim scenario: in (CSV from internal/testsupport/ccsim) -> out (PNG).
# Columns: t_ms, queue_kb, then one Mb/s column per flow. Called by scripts/cc-figures.sh
# with -e "in='...'; out='...'; title='...'; flows=N; buffer_kb=B".
set datafile separator ','
set terminal pngcairo size 1000,700 font ',10'
set output out
set multiplot layout 2,1 title title
set key outside right top
set grid
set ylabel 'throughput (Gb/s)'
set yrange [0:*]
set xrange [0:*]
set format x ''
set lmargin 10
set rmargin 20
plot for [i=1:flows] in using 1:(column(i+2)/1000) skip 1 with lines lw 1.5 title sprintf('flow %d', i)
set format x '%g'
set xlabel 'time (ms)'
set ylabel 'queue (KB)'
set yrange [0:buffer_kb*1.05]
plot in using 1:2 skip 1 with lines lw 1.5 lc rgb '#c0392b' title 'bottleneck queue', \
     buffer_kb with lines dt 2 lc rgb '#555555' title 'buffer'
unset multiplot
