# Sealed-ballot votes: create, cast, status (counts only while open), reveal when all voted,
# reveal at the deadline, list. The author of a vote gets its answer, the others a push;
# `vote_result` (server-authored) goes to every member. Ballots are never pushed.
#! ignore turn_changed
A> {"id":"a1","type":"register","payload":{"name":"alice","protocol_version":2,"agent_id":"alice"}}
A< {"type":"ok","reply_to":"a1"}
A> {"id":"a2","type":"create_room","payload":{"name":"ballot-box","public":true}}
A< {"type":"ok","reply_to":"a2","payload":{"room_id":"$room"}}
A> {"id":"a3","type":"join_room","payload":{"room_id":"$room"}}
A< {"type":"ok","reply_to":"a3"}
B> {"id":"b1","type":"register","payload":{"name":"bob","protocol_version":2,"agent_id":"bob"}}
B< {"type":"ok","reply_to":"b1"}
B> {"id":"b2","type":"join_room","payload":{"room_id":"$room"}}
B< {"type":"ok","reply_to":"b2"}
A< {"type":"agent_joined","payload":{"agent":{"agent_id":"bob"}}}
C> {"id":"c1","type":"register","payload":{"name":"carol","protocol_version":2,"agent_id":"carol"}}
C< {"type":"ok","reply_to":"c1"}
# Create: the members now are the eligible voters.
A> {"id":"a4","type":"create_vote","payload":{"room_id":"$room","title":"Which approach?","description":"pick","options":["A","B","C"]}}
A< {"type":"ok","reply_to":"a4","payload":{"vote_id":"$v1","room_id":"$room","title":"Which approach?","description":"pick","options":["A","B","C"],"status":"open","created_by":"alice","deadline":null,"votes_cast":0,"eligible_voters":2}}
B< {"type":"vote_created","payload":{"vote_id":"$v1","room_id":"$room","title":"Which approach?","options":["A","B","C"],"eligible_voters":2,"eligible_voter_ids":["alice","bob"],"created_by":"alice","deadline":null}}
A> {"id":"a5","type":"create_vote","payload":{"room_id":"$room","title":"one option","options":["A"]}}
A< {"type":"error","reply_to":"a5","payload":{"code":"invalid_payload"}}
A> {"id":"a5b","type":"create_vote","payload":{"room_id":"$room","title":"zero","options":["A","B"],"duration_secs":0}}
A< {"type":"error","reply_to":"a5b","payload":{"code":"invalid_payload"}}
C> {"id":"c2","type":"create_vote","payload":{"room_id":"$room","title":"q","options":["A","B"]}}
C< {"type":"error","reply_to":"c2","payload":{"code":"not_in_room"}}
C> {"id":"c2b","type":"create_vote","payload":{"room_id":"g_nope","title":"q","options":["A","B"]}}
C< {"type":"error","reply_to":"c2b","payload":{"code":"room_not_found"}}
# Cast: counts only, never what anyone voted.
A> {"id":"a6","type":"cast_vote","payload":{"vote_id":"$v1","option_index":3}}
A< {"type":"error","reply_to":"a6","payload":{"code":"invalid_option"}}
A> {"id":"a7","type":"cast_vote","payload":{"vote_id":"vote-nope","option_index":0}}
A< {"type":"error","reply_to":"a7","payload":{"code":"vote_not_found"}}
A> {"id":"a7b","type":"get_vote_status","payload":{"vote_id":"vote-nope"}}
A< {"type":"error","reply_to":"a7b","payload":{"code":"vote_not_found"}}
A> {"id":"a7c","type":"cast_vote","payload":{"vote_id":"$v1","option_index":-1}}
A< {"type":"error","reply_to":"a7c","payload":{"code":"invalid_payload"}}
A> {"id":"a8","type":"cast_vote","payload":{"vote_id":"$v1","option_index":1}}
A< {"type":"ok","reply_to":"a8","payload":{"vote_id":"$v1","votes_cast":1,"eligible_voters":2}}
A> {"id":"a9","type":"cast_vote","payload":{"vote_id":"$v1","option_index":0}}
A< {"type":"error","reply_to":"a9","payload":{"code":"already_voted"}}
C> {"id":"c3","type":"cast_vote","payload":{"vote_id":"$v1","option_index":0}}
C< {"type":"error","reply_to":"c3","payload":{"code":"not_in_room"}}
C> {"id":"c4","type":"get_vote_status","payload":{"vote_id":"$v1"}}
C< {"type":"error","reply_to":"c4","payload":{"code":"not_in_room"}}
B> {"id":"b3","type":"get_vote_status","payload":{"vote_id":"$v1"}}
B< {"type":"ok","reply_to":"b3","payload":{"vote_id":"$v1","status":"open","votes_cast":1,"eligible_voters":2}}
# The last ballot: the answer first, then the reveal to every member.
B> {"id":"b4","type":"cast_vote","payload":{"vote_id":"$v1","option_index":0}}
B< {"type":"ok","reply_to":"b4","payload":{"vote_id":"$v1","votes_cast":2,"eligible_voters":2}}
B< {"type":"vote_result","payload":{"vote_id":"$v1","room_id":"$room","title":"Which approach?","options":["A","B","C"],"tally":[{"option_index":0,"option_text":"A","count":1},{"option_index":1,"option_text":"B","count":1},{"option_index":2,"option_text":"C","count":0}],"ballots":[{"agent_id":"alice","agent_name":"alice","option_index":1},{"agent_id":"bob","agent_name":"bob","option_index":0}],"total_votes":2,"eligible_voters":2,"reason":"all_voted"}}
A< {"type":"vote_result","payload":{"vote_id":"$v1","total_votes":2,"reason":"all_voted"}}
A> {"id":"a10","type":"cast_vote","payload":{"vote_id":"$v1","option_index":0}}
A< {"type":"error","reply_to":"a10","payload":{"code":"vote_closed"}}
A> {"id":"a11","type":"get_vote_status","payload":{"vote_id":"$v1"}}
A< {"type":"ok","reply_to":"a11","payload":{"vote_id":"$v1","status":"closed","votes_cast":2,"total_votes":2,"reason":"all_voted","tally":[{"count":1},{"count":1},{"count":0}],"ballots":[{"agent_id":"alice","option_index":1},{"agent_id":"bob","option_index":0}],"closed_at":"*"}}
# A deadline: one of two voted; the deadline reveals what there is.
B> {"id":"b5","type":"create_vote","payload":{"room_id":"$room","title":"Ship today?","options":["Yes","No"],"duration_secs":1}}
B< {"type":"ok","reply_to":"b5","payload":{"vote_id":"$v2","status":"open","duration_secs":1,"deadline":"*"}}
A< {"type":"vote_created","payload":{"vote_id":"$v2","created_by":"bob","duration_secs":1}}
A> {"id":"a12","type":"cast_vote","payload":{"vote_id":"$v2","option_index":1}}
A< {"type":"ok","reply_to":"a12","payload":{"vote_id":"$v2","votes_cast":1,"eligible_voters":2}}
A< {"type":"vote_result","payload":{"vote_id":"$v2","tally":[{"option_index":0,"count":0},{"option_index":1,"count":1}],"ballots":[{"agent_id":"alice","option_index":1}],"total_votes":1,"eligible_voters":2,"reason":"deadline"}}
B< {"type":"vote_result","payload":{"vote_id":"$v2","total_votes":1,"reason":"deadline"}}
# Newest first; `limit`.
A> {"id":"a13","type":"list_votes","payload":{"room_id":"$room"}}
A< {"type":"ok","reply_to":"a13","payload":{"room_id":"$room","votes":[{"vote_id":"$v2","status":"closed"},{"vote_id":"$v1","status":"closed"}]}}
A> {"id":"a14","type":"list_votes","payload":{"room_id":"$room","limit":1}}
A< {"type":"ok","reply_to":"a14","payload":{"votes":[{"vote_id":"$v2"}]}}
C> {"id":"c5","type":"list_votes","payload":{"room_id":"$room"}}
C< {"type":"error","reply_to":"c5","payload":{"code":"not_in_room"}}
