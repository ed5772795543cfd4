-- Opens ('1') or closes ('0') admissions: ARGV = flag.
redis.call('SET', OPEN, ARGV[1])
return 'ok'
