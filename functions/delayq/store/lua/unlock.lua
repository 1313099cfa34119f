--[[
unlock: release a lock, only if it still holds this owner's token (a plain DEL could release a lock
that expired and was taken by another sweeper meanwhile).

KEYS[1]  the lock
ARGV[1]  token
Returns 1 released, 0 not held with this token
]]
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
