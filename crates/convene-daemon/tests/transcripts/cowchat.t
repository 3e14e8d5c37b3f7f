# Cowchat v2 on the Unix socket: registration, messages, pushes, history, errors.
# Version 2 is required; absent means 1 and is refused. Turn-token pushes race with message
# pushes on the receiving side, so they are checked in cowchat_rooms.t and the Python tests.
#! ignore turn_changed
A> {"id":"a1","type":"register","payload":{"name":"alice","key":""}}
A< {"type":"error","reply_to":"a1","payload":{"code":"unsupported_protocol_version"}}
A> {"id":"a2","type":"get_history","payload":{"room_id":"x"}}
A< {"type":"error","reply_to":"a2","payload":{"code":"not_registered"}}
A> {"id":"a3","type":"register","payload":{"name":"alice","key":"","protocol_version":2,"agent_id":"alice"}}
A< {"type":"ok","reply_to":"a3","payload":{"agent_id":"alice","name":"alice","protocol_version":2,"rooms":[]}}
A> {"id":"a4","type":"ping","payload":{}}
A< {"type":"pong","reply_to":"a4","payload":{}}
A> {"id":"a5","type":"create_room","payload":{"name":"war-room","description":"hello","public":true}}
A< {"type":"ok","reply_to":"a5","payload":{"room_id":"$room","name":"war-room","description":"hello","public":true,"ephemeral":false,"encrypted":false,"created_by":"alice","member_count":0}}
A> {"id":"a6","type":"join_room","payload":{"room_id":"$room"}}
A< {"type":"ok","reply_to":"a6","payload":{"room_id":"$room","member_count":1}}
B> {"id":"b1","type":"register","payload":{"name":"bob","protocol_version":2,"agent_id":"bob"}}
B< {"type":"ok","reply_to":"b1","payload":{"agent_id":"bob"}}
B> {"id":"b2","type":"join_room","payload":{"name":"war-room"}}
B< {"type":"ok","reply_to":"b2","payload":{"room_id":"$room","member_count":2,"seq":"$bobseq"}}
A< {"type":"agent_joined","payload":{"room_id":"$room","agent":{"agent_id":"bob","name":"bob"},"seq":"$bobseq"}}
B> {"id":"b2b","type":"join_room","payload":{"name":"war-room"}}
B< {"type":"error","reply_to":"b2b","payload":{"code":"already_in_room"}}
# A message: the Message to the sender, a push to the other member, the token moves on.
A> {"id":"a7","type":"send_message","payload":{"room_id":"$room","content":"hi bob","mentions":["bob"],"metadata":{"lang":"en"}}}
A< {"type":"ok","reply_to":"a7","payload":{"room_id":"$room","message_id":"$m1","seq":"$s1","agent_id":"alice","agent_name":"alice","content":"hi bob"}}
B< {"type":"mention","payload":{"room_id":"$room","message":{"message_id":"$m1"}}}
B< {"type":"message_received","payload":{"room_id":"$room","message_id":"$m1","seq":"$s1","agent_id":"alice","agent_name":"alice","content":"hi bob","mentions":["bob"],"metadata":{"lang":"en"},"timestamp":"*"}}
B> {"id":"b3","type":"send_message","payload":{"room_id":"$room","content":"hi alice","reply_to":"$m1"}}
B< {"type":"ok","reply_to":"b3","payload":{"message_id":"$m2","seq":"$s2","reply_to":"$m1"}}
A< {"type":"message_received","payload":{"message_id":"$m2","seq":"$s2","agent_id":"bob","reply_to":"$m1"}}
# A thinking pulse: pushed as `thinking`, in history with metadata.type, no token move.
B> {"id":"b3t","type":"thinking","payload":{"room_id":"$room","content":"checking file X"}}
B< {"type":"ok","reply_to":"b3t","payload":{"message_id":"$t1","seq":"$st","metadata":{"type":"thinking"}}}
A< {"type":"thinking","payload":{"message_id":"$t1","agent_id":"bob","content":"checking file X","metadata":{"type":"thinking"}}}
B> {"id":"b4","type":"get_history","payload":{"room_id":"$room","limit":10}}
B< {"type":"ok","reply_to":"b4","payload":{"room_id":"$room","messages":[{"message_id":"$m1","content":"hi bob"},{"message_id":"$m2","content":"hi alice"},{"message_id":"$t1","metadata":{"type":"thinking"}}],"has_more":false}}
B> {"id":"b5","type":"get_history","payload":{"room_id":"$room","since_seq":"$s1"}}
B< {"type":"ok","reply_to":"b5","payload":{"messages":[{"message_id":"$m2"},{"message_id":"$t1"}]}}
B> {"id":"b5b","type":"get_history","payload":{"room_id":"$room","since":"$m2"}}
B< {"type":"ok","reply_to":"b5b","payload":{"messages":[{"message_id":"$t1"}]}}
B> {"id":"b6","type":"room_tip","payload":{"room_id":"$room"}}
B< {"type":"ok","reply_to":"b6","payload":{"room_id":"$room","seq":"$s2","message_id":"$m2"}}
# Errors keep the connection serving.
B> {"id":"b7","type":"send_message","payload":{"room_id":"$room","content":"x","mentions":["carol"]}}
B< {"type":"error","reply_to":"b7","payload":{"code":"not_in_room"}}
B> {"id":"b8","type":"create_room","payload":{"name":"war-room"}}
B< {"type":"error","reply_to":"b8","payload":{"code":"room_name_taken"}}
B> {"id":"b9","type":"fly_to_the_moon","payload":{}}
B< {"type":"error","reply_to":"b9","payload":{"code":"unknown_type"}}
B> not json
B< {"type":"error","payload":{"code":"invalid_frame"}}
B> {"id":"b10","type":"leave_room","payload":{"room_id":"$room"}}
B< {"type":"ok","reply_to":"b10","payload":{"room_id":"$room"}}
A< {"type":"agent_left","payload":{"room_id":"$room","agent_id":"bob"}}
A> {"id":"a8","type":"list_rooms","payload":{}}
A< {"type":"ok","reply_to":"a8","payload":{"rooms":[{"name":"lobby","public":true},{"room_id":"$room","name":"war-room","member_count":1,"last_activity":"*"}]}}
