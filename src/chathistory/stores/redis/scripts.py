"""Redis Lua scripts: each write that must be atomic in a session's slot (append,
truncate, rewrite, insert, save, status marks) or a tenant's (asset GC, expiry fixes), and
the window read in one round trip. Each says its KEYS and ARGV.

Every script that writes the session's JSON (field ``j`` of the session hash) writes
the same JSON to field ``j`` of the rows hash, so that one HMGET of the rows hash reads
a session and its newest rows at one moment without a script (``RedisStore._tail_at``;
a session last written by an older release has no copy until its next write, and its
tail reads go through TAIL_PROBE). Position fields are decimal numbers: never ``j``."""

# Milliseconds of the server's clock (Lua: a write after TIME is allowed, effects are
# replicated), for the hold of a session (field h of the session hash: HOLD).
_NOW_MS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""


def _write_rows(first: int, nrows: int, ncalls: int) -> str:
    """Lua writing the rows and calls given from ``ARGV[first]`` on (``(seq id cum kept
    payload)*`` then ``(call_id seq)*``, as many as ``ARGV[nrows]`` and ``ARGV[ncalls]``
    say) into KEYS rows ids cum kept calls (2-6); leaves ``p`` at the ARGV after them."""
    return f"""local p = {first}
for k = 1, tonumber(ARGV[{nrows}]) do
  local at = ARGV[p]
  redis.call('HSET', KEYS[2], at, ARGV[p + 4])
  redis.call('ZADD', KEYS[3], at, ARGV[p + 1])
  redis.call('ZADD', KEYS[4], ARGV[p + 2], string.format('%012d', tonumber(at)))
  if ARGV[p + 3] == '1' then redis.call('ZADD', KEYS[5], at, at) end
  p = p + 5
end
for k = 1, tonumber(ARGV[{ncalls}]) do
  redis.call('ZADD', KEYS[6], ARGV[p + 1], ARGV[p])
  p = p + 2
end
"""

# KEYS: session rows ids cum kept calls refs.  ARGV: v i r json new_v clear_lo clear_hi
# nrows ncalls nrefs, then (seq id cum kept payload)*, (call_id seq)*, sha*.
# 0: the session is not at v i r, or held (HOLD); -1: a row's id is stored already (an
# append planned on the session as this process last wrote it takes the batch's ids to
# be new); 1: written.
APPEND = """
local s = redis.call('HMGET', KEYS[1], 'v', 'i', 'r', 'h')
if s[1] ~= ARGV[1] or s[2] ~= ARGV[2] or s[3] ~= ARGV[3] then return 0 end
if s[4] then""" + _NOW_MS + """  if now < tonumber(s[4]) then return 0 end
end
for p = 12, 12 + 5 * (tonumber(ARGV[8]) - 1), 5 do
  if redis.call('ZSCORE', KEYS[3], ARGV[p]) then return -1 end
end
for seq = tonumber(ARGV[6]), tonumber(ARGV[7]) - 1 do
  local row = redis.call('HGET', KEYS[2], tostring(seq))
  if row then redis.call('HSET', KEYS[2], tostring(seq), string.sub(row, 1, 1) .. '0' ..
                         string.sub(row, 3)) end
end
""" + _write_rows(11, 8, 9) + """for k = 1, tonumber(ARGV[10]) do
  redis.call('SADD', KEYS[7], ARGV[p])
  p = p + 1
end
redis.call('HSET', KEYS[1], 'v', ARGV[5], 'j', ARGV[4])
redis.call('HSET', KEYS[2], 'j', ARGV[4])
-- one node only (KEYS[8..]: the tenant's recent-order sets, in other slots on a cluster):
-- the session's entry moves with the write itself
if #KEYS > 7 then
  local new, old = ARGV[p], ARGV[p + 1]
  for k = 8, #KEYS do
    redis.call('ZADD', KEYS[k], 0, new)
    if old ~= '' and old ~= new then redis.call('ZREM', KEYS[k], old) end
  end
end
return 1
"""

# KEYS: session rows cum.  ARGV: budget, most rows.  A window read in one round trip (see
# Engine._b_window_probe): the session's JSON, then the first position returned, then the
# rows from the one before the first whose running total reaches token_count - budget to
# the end (at most ARGV[2] of them: the newest; the engine reads further back if needed),
# read 500 at a time (Lua's unpack() has a limit). false (a nil reply) for a missing row.
_SESSION = """
local j = redis.call('HGET', KEYS[1], 'j')
if not j then return false end
local s = cjson.decode(j)
local n = tonumber(s['message_count']) or 0
"""
_ROWS_TO_END = """
local out = {j, lo}
local seq = lo
while seq < n do
  local stop = math.min(n, seq + 500)
  local fields = {}
  for k = seq, stop - 1 do fields[#fields + 1] = tostring(k) end
  local values = redis.call('HMGET', KEYS[2], unpack(fields))
  for k = 1, #fields do out[#out + 1] = values[k] or false end
  seq = stop
end
return out
"""
PROBE = _SESSION + """
local cum = (tonumber(s['token_count']) or 0) - tonumber(ARGV[1])
local first = 0
if cum > 0 then
  local hit = redis.call('ZRANGEBYSCORE', KEYS[3], cum, '+inf', 'LIMIT', 0, 1)
  if #hit > 0 then first = tonumber(hit[1]) else first = n end
end
local lo = math.max(0, math.min(first - 1, n - 1), n - tonumber(ARGV[2]))
""" + _ROWS_TO_END

# KEYS: session rows.  ARGV: rows.  A tail read in one round trip (Engine._b_tail_probe):
# the session's JSON, the first position returned, then the newest ARGV[1] rows (at most
# PROBE_ROWS); false for a missing row.
TAIL_PROBE = _SESSION + """
local lo = math.max(0, n - tonumber(ARGV[1]))
""" + _ROWS_TO_END
PROBE_ROWS = 2000

# KEYS: session rows ids cum kept calls.  ARGV[1]: expected_v, ARGV[2]: seq.  Returns 0
# when the session is not at expected_v; else the own rows from seq on, their ids, running
# totals, kept roles and calls are gone (``seq`` stays a local for what follows).
_DROP_FROM = """
if redis.call('HGET', KEYS[1], 'v') ~= ARGV[1] then return 0 end
local seq = tonumber(ARGV[2])
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], seq, '+inf', 'WITHSCORES')
for k = 2, #gone, 2 do
  local s = tonumber(gone[k])
  redis.call('HDEL', KEYS[2], string.format('%d', s))
  redis.call('ZREM', KEYS[4], string.format('%012d', s))
end
for _, key in ipairs({KEYS[3], KEYS[5], KEYS[6]}) do
  redis.call('ZREMRANGEBYSCORE', key, seq, '+inf')
end
"""

# KEYS: session rows ids cum kept calls over refs.  ARGV: expected_v seq new_v json new_r,
# then the positions whose group-start flag is restored
TRUNCATE = _DROP_FROM + """for k = 6, #ARGV do  -- group starts opened again by the truncation
  local row = redis.call('HGET', KEYS[2], ARGV[k])
  if row then redis.call('HSET', KEYS[2], ARGV[k], string.sub(row, 1, 1) .. '1' ..
                         string.sub(row, 3)) end
end
if seq == 0 then
  redis.call('DEL', KEYS[7], KEYS[8])
  redis.call('HSET', KEYS[1], 'r', ARGV[5])
end
redis.call('HSET', KEYS[1], 'v', ARGV[3], 'j', ARGV[4])
redis.call('HSET', KEYS[2], 'j', ARGV[4])
return 1
"""

# KEYS: session rows ids cum kept calls.  ARGV: expected_v seq new_v json nrows ncalls,
# then (seq id cum kept payload)*, (call_id seq)*: the rows from seq on replaced by those
# given (a message deleted from the middle, the later ones moved down), 0 when the
# session is not at expected_v
REWRITE = _DROP_FROM + _write_rows(7, 5, 6) + """
redis.call('HSET', KEYS[1], 'v', ARGV[3], 'j', ARGV[4])
redis.call('HSET', KEYS[2], 'j', ARGV[4])
return 1
"""

# KEYS: session.  ARGV: ms.  Hold the session's appends off for at most ms (a deletion
# plans on what it reads, then REWRITE writes): the hold's end (its token to RELEASE),
# 0 while another hold lasts, -1 for no session.
HOLD = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end""" + _NOW_MS + """
local h = redis.call('HGET', KEYS[1], 'h')
if h and now < tonumber(h) then return 0 end
redis.call('HSET', KEYS[1], 'h', now + tonumber(ARGV[1]))
return now + tonumber(ARGV[1])
"""

# KEYS: session.  ARGV: token.  The hold HOLD answered ends (unless another took over).
RELEASE = """
if redis.call('HGET', KEYS[1], 'h') == ARGV[1] then redis.call('HDEL', KEYS[1], 'h') end
return 1
"""

# KEYS: session rows.  ARGV: v i r json
INSERT = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'i', ARGV[2], 'r', ARGV[3], 'j', ARGV[4])
redis.call('HSET', KEYS[2], 'j', ARGV[4])
return 1
"""

# KEYS: session rows.  ARGV: expected_v new_v json
SAVE = """
if redis.call('HGET', KEYS[1], 'v') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'v', ARGV[2], 'j', ARGV[3])
redis.call('HSET', KEYS[2], 'j', ARGV[3])
return 1
"""

# KEYS: rows.  ARGV: lo hi (inclusive): clear the group-start byte of those rows
CLEAR_CUTS = """
for seq = tonumber(ARGV[1]), tonumber(ARGV[2]) do
  local row = redis.call('HGET', KEYS[1], tostring(seq))
  if row then redis.call('HSET', KEYS[1], tostring(seq), string.sub(row, 1, 1) .. '0' ..
                         string.sub(row, 3)) end
end
return 1
"""

# KEYS: rows over.  ARGV: status n seq*n override*
SET_STATUS = """
local byte = string.char(tonumber(ARGV[1]) + 128)
local n = tonumber(ARGV[2])
for k = 3, n + 2 do
  local row = redis.call('HGET', KEYS[1], ARGV[k])
  if row then redis.call('HSET', KEYS[1], ARGV[k], byte .. string.sub(row, 2)) end
end
for k = n + 3, #ARGV do redis.call('HSET', KEYS[2], ARGV[k], ARGV[1]) end
return 1
"""

# KEYS: assets asset_types refs:SHA*.  ARGV: (sha nstale member*)* per refs key.
GC = """
local p, removed = 1, 0
for i = 3, #KEYS do
  local sha, n = ARGV[p], tonumber(ARGV[p + 1])
  p = p + 2
  for j = 1, n do
    redis.call('SREM', KEYS[i], ARGV[p])
    p = p + 1
  end
  if redis.call('SCARD', KEYS[i]) == 0 and redis.call('HDEL', KEYS[1], sha) == 1 then
    redis.call('HDEL', KEYS[2], sha)
    removed = removed + 1
  end
end
return removed
"""

# KEYS: expiry.  ARGV: member observed_score new_score ('' removes)
FIX_EXPIRY = """
local now = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not now or tonumber(now) ~= tonumber(ARGV[2]) then return 0 end
if ARGV[3] == '' then redis.call('ZREM', KEYS[1], ARGV[1])
else redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1]) end
return 1
"""
