# Elections and decisions: the starter gets its answer, the others `election_started`; one
# candidate declines within the 2 s window, the server elects the other and pushes
# `leader_elected` to every member. Only the leader may decide; leaving clears leadership;
# an election everybody declined ends with `leader_cleared` (reason "no candidates").
#! ignore turn_changed
A> {"id":"a1","type":"register","payload":{"name":"alice","protocol_version":2,"agent_id":"alice"}}
A< {"type":"ok","reply_to":"a1"}
A> {"id":"a2","type":"create_room","payload":{"name":"council","public":true}}
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
A> {"id":"a4","type":"decline_election","payload":{"room_id":"$room"}}
A< {"type":"error","reply_to":"a4","payload":{"code":"no_election_active"}}
A> {"id":"a5","type":"decision","payload":{"room_id":"$room","content":"rogue"}}
A< {"type":"error","reply_to":"a5","payload":{"code":"not_leader"}}
C> {"id":"c2","type":"elect_leader","payload":{"room_id":"$room"}}
C< {"type":"error","reply_to":"c2","payload":{"code":"not_in_room"}}
A> {"id":"a6","type":"elect_leader","payload":{"room_id":"$room"}}
A< {"type":"ok","reply_to":"a6","payload":{"room_id":"$room","candidates":["alice","bob"],"started_by":"alice","opt_out_seconds":2,"ends_at":"*"}}
B< {"type":"election_started","payload":{"room_id":"$room","candidates":["alice","bob"],"started_by":"alice","opt_out_seconds":2}}
B> {"id":"b3","type":"elect_leader","payload":{"room_id":"$room"}}
B< {"type":"error","reply_to":"b3","payload":{"code":"election_in_progress"}}
C> {"id":"c3","type":"decline_election","payload":{"room_id":"$room"}}
C< {"type":"error","reply_to":"c3","payload":{"code":"not_in_room"}}
B> {"id":"b4","type":"decline_election","payload":{"room_id":"$room"}}
B< {"type":"ok","reply_to":"b4","payload":{"room_id":"$room","agent_id":"bob","declined":true}}
A< {"type":"leader_elected","payload":{"room_id":"$room","leader_id":"alice","leader_name":"alice"}}
B< {"type":"leader_elected","payload":{"room_id":"$room","leader_id":"alice","leader_name":"alice"}}
B> {"id":"b5","type":"decision","payload":{"room_id":"$room","content":"mine"}}
B< {"type":"error","reply_to":"b5","payload":{"code":"not_leader"}}
A> {"id":"a7","type":"decision","payload":{"room_id":"$room","content":"We go with plan B","metadata":{"why":"cheaper"}}}
A< {"type":"ok","reply_to":"a7","payload":{"message_id":"$d1","seq":"$ds","agent_id":"alice","content":"We go with plan B","metadata":{"why":"cheaper","type":"decision"}}}
B< {"type":"decision_made","payload":{"room_id":"$room","leader_id":"alice","leader_name":"alice","content":"We go with plan B","message_id":"$d1","seq":"$ds","timestamp":"*"}}
B> {"id":"b6","type":"get_history","payload":{"room_id":"$room"}}
B< {"type":"ok","reply_to":"b6","payload":{"messages":[{"message_id":"$d1","metadata":{"type":"decision"}}]}}
# The leader leaves: leadership clears.
A> {"id":"a8","type":"leave_room","payload":{"room_id":"$room"}}
A< {"type":"ok","reply_to":"a8"}
B< {"type":"agent_left","payload":{"room_id":"$room","agent_id":"alice"}}
B< {"type":"leader_cleared","payload":{"room_id":"$room","reason":"leader left","leader_id":"alice"}}
# Everybody declines: no leader.
B> {"id":"b7","type":"elect_leader","payload":{"room_id":"$room"}}
B< {"type":"ok","reply_to":"b7","payload":{"candidates":["bob"]}}
B> {"id":"b8","type":"decline_election","payload":{"room_id":"$room"}}
B< {"type":"ok","reply_to":"b8"}
B> {"id":"b8b","type":"decline_election","payload":{"room_id":"$room"}}
B< {"type":"ok","reply_to":"b8b","payload":{"declined":true}}
B< {"type":"leader_cleared","payload":{"room_id":"$room","reason":"no candidates"}}
B> {"id":"b9","type":"decision","payload":{"room_id":"$room","content":"still no"}}
B< {"type":"error","reply_to":"b9","payload":{"code":"not_leader"}}
# An encrypted room: the leader's decision must be sealed.
B> {"id":"b10","type":"create_room","payload":{"name":"vault","encrypted":true}}
B< {"type":"ok","reply_to":"b10","payload":{"room_id":"$vault","encrypted":true}}
B> {"id":"b11","type":"join_room","payload":{"room_id":"$vault"}}
B< {"type":"ok","reply_to":"b11"}
B> {"id":"b12","type":"elect_leader","payload":{"room_id":"$vault"}}
B< {"type":"ok","reply_to":"b12","payload":{"candidates":["bob"]}}
B< {"type":"leader_elected","payload":{"room_id":"$vault","leader_id":"bob"}}
B> {"id":"b13","type":"decision","payload":{"room_id":"$vault","content":"plain"}}
B< {"type":"error","reply_to":"b13","payload":{"code":"plaintext_in_encrypted_room"}}
B> {"id":"b14","type":"decision","payload":{"room_id":"$vault","content":"cow1:AAECAwQFBgcICQoLIyz9JMG5YnCtToYuqTS/uVRA+WmFnXIPxIAT"}}
B< {"type":"ok","reply_to":"b14","payload":{"content":"cow1:AAECAwQFBgcICQoLIyz9JMG5YnCtToYuqTS/uVRA+WmFnXIPxIAT","metadata":{"type":"decision"}}}
