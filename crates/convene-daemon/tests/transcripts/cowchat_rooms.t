# Rooms: private rooms per key, sub-rooms, rename/destroy by the creator only, ephemeral
# rooms removed with their last member, lobby immutable, room_info with the turn token.
A> {"id":"a1","type":"register","payload":{"name":"alice","protocol_version":2,"agent_id":"alice"}}
A< {"type":"ok","reply_to":"a1"}
B> {"id":"b1","type":"register","payload":{"name":"bob","protocol_version":2,"agent_id":"bob"}}
B< {"type":"ok","reply_to":"b1"}
A> {"id":"a2","type":"create_room","payload":{"name":"alpha","public":true}}
A< {"type":"ok","reply_to":"a2","payload":{"room_id":"$alpha","name":"alpha","parent_id":null}}
B< {"type":"room_created","payload":{"room_id":"$alpha"}}
A> {"id":"a3","type":"create_room","payload":{"name":"alpha-tests","parent_id":"$alpha","public":true}}
A< {"type":"ok","reply_to":"a3","payload":{"room_id":"$sub","parent_id":"$alpha"}}
B< {"type":"room_created","payload":{"room_id":"$sub"}}
A> {"id":"a4","type":"join_room","payload":{"room_id":"$alpha"}}
A< {"type":"ok","reply_to":"a4"}
A< {"type":"turn_changed","payload":{"current_turn_holder":"alice","reason":"joined"}}
A> {"id":"a5","type":"room_info","payload":{"room_id":"$alpha"}}
A< {"type":"ok","reply_to":"a5","payload":{"room":{"room_id":"$alpha","member_count":1},"agents":[{"agent_id":"alice","online":true,"status":"idle"}],"sub_rooms":[{"room_id":"$sub","name":"alpha-tests"}],"current_turn_holder":"alice","turn_order":["alice"]}}
A> {"id":"a6","type":"list_rooms","payload":{"parent_id":"$alpha"}}
A< {"type":"ok","reply_to":"a6","payload":{"rooms":[{"room_id":"$sub"}]}}
# Only the creator renames or destroys; the lobby never.
B> {"id":"b2","type":"rename_room","payload":{"room_id":"$alpha","name":"beta"}}
B< {"type":"error","reply_to":"b2","payload":{"code":"access_denied"}}
A> {"id":"a7","type":"rename_room","payload":{"room_id":"$alpha","name":"  alpha-2 "}}
A< {"type":"ok","reply_to":"a7","payload":{"room_id":"$alpha","name":"alpha-2"}}
A< {"type":"room_updated","payload":{"room_id":"$alpha","name":"alpha-2"}}
B< {"type":"room_updated","payload":{"room_id":"$alpha","name":"alpha-2"}}
A> {"id":"a8","type":"destroy_room","payload":{"name":"lobby"}}
A< {"type":"error","reply_to":"a8","payload":{"code":"access_denied"}}
A> {"id":"a9","type":"destroy_room","payload":{"room_id":"$sub"}}
A< {"type":"ok","reply_to":"a9","payload":{"room_id":"$sub"}}
A< {"type":"room_destroyed","payload":{"room_id":"$sub"}}
B< {"type":"room_destroyed","payload":{"room_id":"$sub"}}
B> {"id":"b3","type":"join_room","payload":{"room_id":"$sub"}}
B< {"type":"error","reply_to":"b3","payload":{"code":"room_not_found"}}
# An ephemeral room goes with its last member.
B> {"id":"b4","type":"create_room","payload":{"name":"quick-sync","ephemeral":true,"public":true}}
B< {"type":"ok","reply_to":"b4","payload":{"room_id":"$eph","ephemeral":true}}
A< {"type":"room_created","payload":{"room_id":"$eph"}}
B> {"id":"b5","type":"join_room","payload":{"room_id":"$eph"}}
B< {"type":"ok","reply_to":"b5"}
B< {"type":"turn_changed","payload":{"current_turn_holder":"bob"}}
B> {"id":"b6","type":"leave_room","payload":{"room_id":"$eph"}}
B< {"type":"ok","reply_to":"b6"}
B< {"type":"room_destroyed","payload":{"room_id":"$eph"}}
A< {"type":"room_destroyed","payload":{"room_id":"$eph"}}
# Presence and typing reach the members of the agent's rooms.
B> {"id":"b7","type":"join_room","payload":{"room_id":"$alpha"}}
B< {"type":"ok","reply_to":"b7"}
A< {"type":"agent_joined","payload":{"agent":{"agent_id":"bob"}}}
B> {"id":"b8","type":"set_presence","payload":{"status":"working","status_detail":"reviewing section 3","progress":57}}
B< {"type":"ok","reply_to":"b8","payload":{}}
B< {"type":"presence_update","payload":{"agent_id":"bob","status":"working","progress":57}}
A< {"type":"presence_update","payload":{"agent_id":"bob","agent_name":"bob","status":"working","status_detail":"reviewing section 3","progress":57}}
B> {"id":"b9","type":"set_typing","payload":{"room_id":"$alpha","typing":true}}
B< {"type":"ok","reply_to":"b9"}
A< {"type":"typing_indicator","payload":{"room_id":"$alpha","agent_id":"bob","agent_name":"bob","typing":true}}
B> {"id":"b10","type":"set_presence","payload":{"status":"asleep"}}
B< {"type":"error","reply_to":"b10","payload":{"code":"invalid_payload"}}
A> {"id":"a10","type":"list_agents","payload":{"room_id":"$alpha"}}
A< {"type":"ok","reply_to":"a10","payload":{"agents":[{"agent_id":"alice"},{"agent_id":"bob","status":"working","progress":57}]}}
