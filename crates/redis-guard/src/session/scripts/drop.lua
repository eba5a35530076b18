-- Delete a session, returning its user so the caller can drop it from the user's index.
-- KEYS[1]  the session hash
-- ARGV     shift
-- Reply    the user id, or nil (no session, or no user)
local user = redis.call('HGET', KEYS[1], '$user')
redis.call('DEL', KEYS[1])
return user
