"""What the watchdog reads from the host, as pure parsers on fixtures: connections on the engine's port, the
front door's counters, a process's CPU time, how supervisord says an engine exited, the kernel's OOM killer."""
from ds4_converge.service.busy import FrontSlot, parse_connections, parse_front_stat
from ds4_converge.service.exits import oom_killed, oom_words, parse_exit
from ds4_converge.core.processes import parse_cpu_ticks

TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 19946 1 0 100 0 0 10 0
   1: 0100007F:1F90 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000  1000        0 25695 1 0 20 4 30 10 -1
   2: 0100007F:1F90 0100007F:D2F2 08 00000000:00000000 00:00000000 00000000  1000        0 25696 1 0 20 4 30 10 -1
   3: 0100007F:1F90 0100007F:D2F4 06 00000000:00000000 03:00000F2B 00000000     0        0 0 3 0
   4: 0100007F:D2F6 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 25697 1 0 20 4 30 10 -1
   5: 0100007F:1F91 0100007F:D2F8 01 00000000:00000000 00:00000000 00000000  1000        0 25698 1 0 20 4 30 10 -1
"""


def test_requests_in_flight_are_connections_accepted_on_the_port_that_hold_work():
    # 8080 = 0x1F90: one ESTABLISHED, one CLOSE_WAIT (its client left; the engine still holds it); not the
    # listener, not TIME_WAIT, not a client's own socket to the port, not the other slot
    assert parse_connections(TCP, 8080) == 2
    assert parse_connections(TCP, 8081) == 1
    assert parse_connections(TCP, 9999) == 0
    assert parse_connections("", 8080) == 0


SHOW_STAT = """\
# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status,weight,act,bck,chkfail,chkdown,lastchg,downtime,qlimit,pid,iid,sid,throttle,lbtot,tracked,type,rate,rate_lim,rate_max,check_status,check_code,check_duration,hrsp_1xx,hrsp_2xx,hrsp_3xx,hrsp_4xx,hrsp_5xx,hrsp_other
ds4,FRONTEND,,,1,2,262144,9,3000,90000,0,0,0,,,,,OPEN,,,,,,,,,1,2,0,,,,0,0,0,3,,,,0,8,0,1,0,0
ds4-engine,a,0,0,1,1,,5,2000,81234,,0,,0,0,0,0,UP,1,1,0,,0,120,0,,1,3,1,,5,,2,0,,2,,,,0,4,0,0,1,0
ds4-engine,b,0,0,0,0,,0,0,0,,0,,0,0,0,0,MAINT,1,1,0,,0,120,0,,1,3,2,,0,,2,0,,0,,,,0,0,0,0,0,0
"""


def test_the_front_door_counters_of_one_slot():
    assert parse_front_stat(SHOW_STAT, "ds4-engine", "a") == FrontSlot(sessions=1, bytes_out=81234, answers_2xx=4,
                                                                      answers_5xx=1)
    assert parse_front_stat(SHOW_STAT, "ds4-engine", "b") == FrontSlot(0, 0, 0, 0)
    assert parse_front_stat(SHOW_STAT, "other-engine", "a") is None
    assert parse_front_stat("Unknown command.\n", "ds4-engine", "a") is None


def test_cpu_time_is_user_and_system_ticks_and_a_name_with_spaces_and_parens_does_not_shift_it():
    stat = "4242 (ds4 (server) x) S 1 4242 4242 0 -1 4194560 900 0 0 0 1234 56 0 0 20 0 9 0 777 0 0"
    assert parse_cpu_ticks(stat) == 1234 + 56


SUPERVISORD_LOG = """\
2026-12-03 14:00:00,001 INFO spawned: 'ds4' with pid 100
2026-12-03 14:00:05,001 WARN exited: ds4 (exit status 1; not expected)
2026-12-03 14:00:06,001 INFO spawned: 'ds4' with pid 200
2026-12-03 14:00:09,001 WARN exited: ds4-other (terminated by SIGSEGV (core dumped); not expected)
2026-12-03 14:00:10,001 WARN exited: ds4 (terminated by SIGKILL; not expected)
"""


def test_the_signal_of_an_exit_comes_from_supervisords_log_line_where_its_xmlrpc_says_minus_one():
    assert parse_exit(SUPERVISORD_LOG, "ds4") == {"signal": "SIGKILL"}
    assert parse_exit(SUPERVISORD_LOG, "ds4-other") == {"signal": "SIGSEGV"}
    assert parse_exit(SUPERVISORD_LOG.split("2026-12-03 14:00:06")[0], "ds4") == {"exit_status": 1}
    assert parse_exit(SUPERVISORD_LOG, "ds4.watchdog") == {}


KMSG = """\
6,1101,5000000,-;ds4-server invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0
3,1130,5000100,-;oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/user.slice,task=ds4-server,pid=200,uid=1000
3,1131,5000101,-;Out of memory: Killed process 200 (ds4-server) total-vm:90000000kB, anon-rss:80000000kB, file-rss:0kB
6,1132,5000300,-;oom_reaper: reaped process 200 (ds4-server), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB
"""


def test_the_kernel_log_names_the_oom_killer_for_that_pid_only_and_unknown_where_it_cannot_be_read():
    assert oom_killed(KMSG, 200)
    assert not oom_killed(KMSG, 20) and not oom_killed(KMSG, 2000)
    assert oom_killed("3,1,1,-;Memory cgroup out of memory: Killed process 77 (ds4-server)\n", 77)
    assert oom_words(200, KMSG) == "yes" and oom_words(201, KMSG) == "no"
    assert oom_words(200, None) == "unknown" and oom_words(None, KMSG) == "unknown"
