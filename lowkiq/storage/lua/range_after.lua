-- range_after: a page of a sorted set after a cursor (score, id), for paging
-- through ties: asc gives members with score == cursor and id > after_id, then
-- scores beyond; desc gives score == cursor and id < after_id, then below.
-- Ids compare by bytes, as Redis orders equal-score members.
-- KEYS[1]  the shard's prefix (routing only)
-- KEYS[2]  the sorted set (a key of the same shard)
-- ARGV[1]  cursor score
-- ARGV[2]  after_id
-- ARGV[3]  far bound as a ZCOUNT max: asc, the range's max; desc, the
--          complement of the range's min (members counted by it are outside)
-- ARGV[4]  limit
-- ARGV[5]  "asc" or "desc"
-- Returns: flat list member, score, ... in page order
local key, score, after_id, far = KEYS[2], ARGV[1], ARGV[2], ARGV[3]
local limit, desc = tonumber(ARGV[4]), ARGV[5] == 'desc'

local function bytes_less(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- ranks [lo, hi) hold the members whose score equals the cursor
local lo = redis.call('zcount', key, '-inf', '(' .. score)
local hi = redis.call('zcount', key, '-inf', score)
-- first rank of the tie group beyond the cursor (asc) or at/after it (desc)
while lo < hi do
  local mid = math.floor((lo + hi) / 2)
  local member = redis.call('zrange', key, mid, mid)[1]
  local past
  if desc then past = not bytes_less(member, after_id) else past = bytes_less(after_id, member) end
  if past then hi = mid else lo = mid + 1 end
end
local edge = redis.call('zcount', key, '-inf', far)
if not desc then
  local stop = math.min(lo + limit, edge) - 1
  if stop < lo then return {} end
  return redis.call('zrange', key, lo, stop, 'withscores')
end
local top = lo - 1
local bottom = math.max(top - limit + 1, edge)
if top < bottom then return {} end
local rows = redis.call('zrange', key, bottom, top, 'withscores')
local out = {}
for i = #rows - 1, 1, -2 do
  out[#out + 1] = rows[i]
  out[#out + 1] = rows[i + 1]
end
return out
