--[[
jobs_moved: reads, or sets, the partition's _jobs_moved mark: set once no job of the partition is
left in its topics' own hashes (move_jobs.lua), so that its scripts look for jobs nowhere else
(keys.py Partition.key_group).

KEYS[1]  the partition's _jobs_moved mark
ARGV[1]  '1' sets it; '' reads it
Returns 1 if it is set.
]]
if ARGV[1] == '1' then
  redis.call('SET', KEYS[1], '1')
end
return redis.call('EXISTS', KEYS[1])
