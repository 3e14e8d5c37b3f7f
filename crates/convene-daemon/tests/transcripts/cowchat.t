# Cowchat v2 on the Unix socket: registration, rooms, messages, pushes, history, errors.
# Version 2 is required; absent means 1 and is refused.
A> {"id":"a1","type":"register","payload":{"name":"alice","key":""}}
A< {"type":"error","reply_to":"a1","payload":{"code":"unsupported_protocol_version"}}
A> {"id":"a2","type":"get_history","payload":{"room_id":"x"}}
A< {"type":"error","reply_to":"a2","payload":{"code":"not_registered"}}
A> {"id":"a3","type":"register","payload":{"name":"alice","key":"","protocol_version":2,"agent_id":"alice"}}
A< {"type":"registered","reply_to":"a3","payload":{"agent_id":"alice","protocol_version":2,"rooms":[]}}
A> {"id":"a4","type":"ping","payload":{}}
A< {"type":"pong","reply_to":"a4","payload":{}}
A> {"id":"a5","type":"create_room","payload":{"name":"lobby","description":"hello"}}
A< {"type":"room_created","reply_to":"a5","payload":{"room_id":"$room","name":"lobby","description":"hello","member_count":0}}
A> {"id":"a6","type":"join_room","payload":{"room_id":"$room"}}
A< {"type":"room_joined","reply_to":"a6","payload":{"room_id":"$room","member_count":1,"already_member":false}}
B> {"id":"b1","type":"register","payload":{"name":"bob","protocol_version":2,"agent_id":"bob"}}
B< {"type":"registered","reply_to":"b1","payload":{"agent_id":"bob"}}
B> {"id":"b2","type":"join_room","payload":{"name":"lobby"}}
B< {"type":"room_joined","reply_to":"b2","payload":{"room_id":"$room","member_count":2,"seq":"$bobseq"}}
A< {"type":"agent_joined","payload":{"room_id":"$room","agent_id":"bob","name":"bob","seq":"$bobseq"}}
# A message: reply to the sender, push to the other member, with seq and metadata.
A> {"id":"a7","type":"send_message","payload":{"room_id":"$room","content":"hi bob","mentions":["bob"],"metadata":{"lang":"en"}}}
A< {"type":"message_sent","reply_to":"a7","payload":{"room_id":"$room","message_id":"$m1","seq":"$s1"}}
B< {"type":"message_received","payload":{"room_id":"$room","message_id":"$m1","seq":"$s1","sender":"alice","content":"hi bob","mentions":["bob"],"metadata":{"lang":"en"},"reply_to":null}}
B> {"id":"b3","type":"send_message","payload":{"room_id":"$room","content":"hi alice","reply_to":"$m1"}}
B< {"type":"message_sent","reply_to":"b3","payload":{"message_id":"$m2","seq":"$s2"}}
A< {"type":"message_received","payload":{"message_id":"$m2","seq":"$s2","sender":"bob","reply_to":"$m1","mentions":[],"metadata":{}}}
B> {"id":"b4","type":"get_history","payload":{"room_id":"$room","limit":10}}
B< {"type":"history","reply_to":"b4","payload":{"room_id":"$room","messages":[{"message_id":"$m1","content":"hi bob"},{"message_id":"$m2","content":"hi alice"}],"has_more":false}}
B> {"id":"b5","type":"get_history","payload":{"room_id":"$room","since_seq":"$s1"}}
B< {"type":"history","reply_to":"b5","payload":{"messages":[{"message_id":"$m2"}]}}
B> {"id":"b6","type":"room_tip","payload":{"room_id":"$room"}}
B< {"type":"room_tip","reply_to":"b6","payload":{"room_id":"$room","seq":"$s2","message_id":"$m2"}}
# Errors keep the connection serving.
B> {"id":"b7","type":"send_message","payload":{"room_id":"$room","content":"x","mentions":["carol"]}}
B< {"type":"error","reply_to":"b7","payload":{"code":"not_member"}}
B> {"id":"b8","type":"create_room","payload":{"name":"lobby"}}
B< {"type":"error","reply_to":"b8","payload":{"code":"room_exists"}}
B> {"id":"b9","type":"elect_leader","payload":{}}
B< {"type":"error","reply_to":"b9","payload":{"code":"unknown_type"}}
B> not json
B< {"type":"error","payload":{"code":"invalid_frame"}}
B> {"id":"b10","type":"leave_room","payload":{"room_id":"$room"}}
B< {"type":"room_left","reply_to":"b10","payload":{"room_id":"$room"}}
A< {"type":"agent_left","payload":{"room_id":"$room","agent_id":"bob"}}
A> {"id":"a8","type":"list_rooms","payload":{}}
A< {"type":"room_list","reply_to":"a8","payload":{"rooms":[{"room_id":"$room","name":"lobby","member_count":1,"last_activity":"*"}]}}
