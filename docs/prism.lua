-- Wireshark dissector for the Prism wire format (version 1), carried over
-- UDP (default port 20562 = prism::wire::kDefaultUdpPort). Layouts:
-- docs/wire-format.md, transport/wire/packet.h.
--
-- Usage:
--   wireshark -X lua_script:docs/prism.lua capture.pcap
--   tshark -X lua_script:docs/prism.lua -r capture.pcap -Y prismtp \
--     -T fields -e prismtp.type -e prismtp.psn
-- Other ports: "Decode As... -> PRISMTP", or the heuristic dissector
-- (enabled by default) that recognises the magic, version and a valid
-- header checksum on any UDP port.
--
-- The protocol's filter name is "prismtp" because Wireshark already has a
-- built-in "prism" (the 802.11 Prism capture header).
--
-- Every field is little-endian. The header checksum (CRC32C of the header with
-- the checksum field zeroed) is verified and shown as prismtp.hdr_crc.status.

local kMagic = 0x5052
local kVersion = 1
local kDefaultUdpPort = 20562

local prismtp = Proto("prismtp", "Prism Multipath Transport")

local types = {
  [1] = "DATA", [2] = "SACK", [3] = "NACK", [4] = "PROBE", [5] = "PROBE_ACK",
  [6] = "CONNECT", [7] = "CONNECT_ACK", [8] = "PLANE_STATUS",
}
local header_size = {
  [1] = 64, [2] = 84, [3] = 32, [4] = 28, [5] = 28, [6] = 36, [7] = 36,
  [8] = 20,
}
local nack_reasons = {
  [1] = "TRIMMED", [2] = "OUT_OF_WINDOW", [3] = "NO_BUFFER", [4] = "BAD_KEY",
  [5] = "BAD_RANGE", [6] = "CORRUPT",
}
local crc_status = { [0] = "bad", [1] = "good" }

local f = prismtp.fields
-- Common header.
f.magic = ProtoField.uint16("prismtp.magic", "Magic", base.HEX)
f.version = ProtoField.uint8("prismtp.version", "Version", base.DEC)
f.type = ProtoField.uint8("prismtp.type", "Type", base.DEC, types)
f.hdr_crc = ProtoField.uint32("prismtp.hdr_crc", "Header checksum", base.HEX)
f.hdr_crc_status = ProtoField.uint8("prismtp.hdr_crc.status",
                                    "Header checksum status", base.DEC,
                                    crc_status)
f.dst_conn = ProtoField.uint32("prismtp.dst_conn", "Destination connection",
                               base.DEC)
-- Shared by several types.
f.psn = ProtoField.uint32("prismtp.psn", "PSN", base.DEC)
f.cum_psn = ProtoField.uint32("prismtp.cum_psn", "Cumulative PSN", base.DEC)
f.path_id = ProtoField.uint16("prismtp.path_id", "Path id", base.DEC)
f.send_ts = ProtoField.uint64("prismtp.send_ts", "Send timestamp", base.DEC)
f.echo_path = ProtoField.uint16("prismtp.echo_path", "Echoed path id",
                                base.DEC)
f.echo_ts = ProtoField.uint64("prismtp.echo_ts", "Echoed timestamp", base.DEC)
f.ecn_seen = ProtoField.uint8("prismtp.ecn_seen", "ECN seen", base.DEC)
f.reserved = ProtoField.uint16("prismtp.reserved", "Reserved", base.HEX)
-- DATA.
f.msn = ProtoField.uint32("prismtp.msn", "Message sequence number", base.DEC)
f.msg_offset = ProtoField.uint32("prismtp.msg_offset", "Message offset",
                                 base.DEC)
f.msg_len = ProtoField.uint32("prismtp.msg_len", "Message length", base.DEC)
f.rkey = ProtoField.uint32("prismtp.rkey", "Remote key", base.HEX)
f.remote_addr = ProtoField.uint64("prismtp.remote_addr", "Remote address",
                                  base.HEX)
f.payload_len = ProtoField.uint16("prismtp.payload_len", "Payload length",
                                  base.DEC)
f.payload_len_hi = ProtoField.uint16("prismtp.payload_len_hi",
                                     "Payload length, bits 16-31", base.DEC)
f.flags = ProtoField.uint16("prismtp.flags", "Flags", base.HEX)
f.flag_retransmit = ProtoField.bool("prismtp.flags.retransmit", "Retransmit",
                                    16, nil, 0x0001)
f.flag_last = ProtoField.bool("prismtp.flags.last", "Last of message", 16, nil,
                              0x0002)
f.flag_immediate = ProtoField.bool("prismtp.flags.immediate", "Has immediate",
                                   16, nil, 0x0004)
f.flag_trimmed = ProtoField.bool("prismtp.flags.trimmed", "Trimmed", 16, nil,
                                 0x0008)
f.flag_payload_crc = ProtoField.bool("prismtp.flags.payload_crc",
                                     "Payload CRC valid", 16, nil, 0x0010)
f.flag_first = ProtoField.bool("prismtp.flags.first", "First of message", 16,
                               nil, 0x0020)
f.flag_unknown = ProtoField.uint16("prismtp.flags.unknown",
                                   "Unknown flag bits", base.HEX, nil, 0xFFC0)
f.immediate = ProtoField.uint32("prismtp.immediate", "Immediate", base.HEX)
f.payload_crc = ProtoField.uint32("prismtp.payload_crc", "Payload CRC32C",
                                  base.HEX)
f.trimmed = ProtoField.bool("prismtp.trimmed", "Payload trimmed")
f.payload = ProtoField.bytes("prismtp.payload", "Payload")
-- SACK.
f.bytes_received = ProtoField.uint64("prismtp.bytes_received",
                                     "Bytes received", base.DEC)
f.bitmap = ProtoField.bytes("prismtp.sack.bitmap", "SACK bitmap (256 bits)")
f.bitmap_word = ProtoField.uint64("prismtp.sack.bitmap_word", "Bitmap word",
                                  base.HEX)
f.bitmap_base = ProtoField.uint32("prismtp.sack.bitmap_base", "Bitmap base PSN",
                                  base.DEC)
f.sacked = ProtoField.uint16("prismtp.sack.count", "PSNs marked in bitmap",
                             base.DEC)
f.trigger_psn = ProtoField.uint32("prismtp.sack.trigger_psn", "Trigger PSN",
                                  base.DEC)
f.ooo_count = ProtoField.uint32("prismtp.sack.ooo_count", "Out-of-order count",
                                base.DEC)
f.rx_window_penalty = ProtoField.uint16("prismtp.sack.rx_window_penalty",
                                        "Receive window penalty", base.DEC)
f.coalesced = ProtoField.uint16("prismtp.sack.coalesced", "Coalesced packets",
                                base.DEC)
-- NACK.
f.nack_reason = ProtoField.uint8("prismtp.nack.reason", "Reason", base.DEC,
                                 nack_reasons)
-- PROBE / PROBE_ACK.
f.probe_seq = ProtoField.uint32("prismtp.probe.seq", "Probe sequence",
                                base.DEC)
-- CONNECT / CONNECT_ACK.
f.src_conn = ProtoField.uint32("prismtp.src_conn", "Source connection",
                               base.DEC)
f.nonce = ProtoField.uint64("prismtp.connect.nonce", "Nonce", base.HEX)
f.mtu_payload = ProtoField.uint32("prismtp.connect.mtu_payload",
                                  "MTU payload", base.DEC)
f.connect_flags = ProtoField.uint32("prismtp.connect.flags", "Connect flags",
                                    base.HEX)
f.connect_flag_crc = ProtoField.bool("prismtp.connect.flags.payload_crc",
                                     "Payload checksum requested", 32, nil,
                                     0x00000001)
f.num_paths = ProtoField.uint16("prismtp.connect.num_paths", "Paths", base.DEC)
f.num_planes = ProtoField.uint16("prismtp.connect.num_planes", "Planes",
                                 base.DEC)
-- PLANE_STATUS.
f.planes_down = ProtoField.uint32("prismtp.plane.down", "Planes down (mask)",
                                  base.HEX)
f.plane_seq = ProtoField.uint32("prismtp.plane.seq", "Status sequence",
                                base.DEC)

local ef_bad_crc = ProtoExpert.new("prismtp.hdr_crc.bad",
                                   "Header checksum mismatch",
                                   expert.group.CHECKSUM, expert.severity.ERROR)
local ef_short = ProtoExpert.new("prismtp.short", "Truncated Prism header",
                                 expert.group.MALFORMED, expert.severity.ERROR)
local ef_bad_len = ProtoExpert.new("prismtp.bad_length",
                                   "Payload present but not payload_len bytes",
                                   expert.group.MALFORMED,
                                   expert.severity.ERROR)
prismtp.experts = { ef_bad_crc, ef_short, ef_bad_len }

-- CRC32C (Castagnoli, reflected 0x82F63B78), table-driven, Lua 5.2 bit32.
local crc_table = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do
    if bit32.band(c, 1) ~= 0 then
      c = bit32.bxor(bit32.rshift(c, 1), 0x82F63B78)
    else
      c = bit32.rshift(c, 1)
    end
  end
  crc_table[i] = c
end

-- CRC32C of the header bytes with bytes [4, 8) taken as zero.
local function header_crc(tvb, hdr_len)
  local c = 0xFFFFFFFF
  local bytes = tvb:range(0, hdr_len):bytes()
  for i = 0, hdr_len - 1 do
    local b = bytes:get_index(i)
    if i >= 4 and i < 8 then b = 0 end
    c = bit32.bxor(bit32.rshift(c, 8),
                   crc_table[bit32.band(bit32.bxor(c, b), 0xFF)])
  end
  return bit32.bnot(c)
end

local function le32(tvb, o) return tvb(o, 4):le_uint() end
local function le16(tvb, o) return tvb(o, 2):le_uint() end

local function popcount64(tvb, o)
  local n = 0
  for i = 0, 7 do
    local b = tvb(o + i, 1):uint()
    while b ~= 0 do
      n = n + bit32.band(b, 1)
      b = bit32.rshift(b, 1)
    end
  end
  return n
end

local function dissect_data(tvb, pinfo, t, info)
  t:add_le(f.psn, tvb(12, 4))
  t:add_le(f.msn, tvb(16, 4))
  t:add_le(f.msg_offset, tvb(20, 4))
  t:add_le(f.msg_len, tvb(24, 4))
  t:add_le(f.rkey, tvb(28, 4))
  t:add_le(f.remote_addr, tvb(32, 8))
  t:add_le(f.send_ts, tvb(40, 8))
  t:add_le(f.payload_len, tvb(48, 2))
  t:add_le(f.path_id, tvb(50, 2))
  local ft = t:add_le(f.flags, tvb(52, 2))
  ft:add_le(f.flag_retransmit, tvb(52, 2))
  ft:add_le(f.flag_last, tvb(52, 2))
  ft:add_le(f.flag_immediate, tvb(52, 2))
  ft:add_le(f.flag_trimmed, tvb(52, 2))
  ft:add_le(f.flag_payload_crc, tvb(52, 2))
  ft:add_le(f.flag_first, tvb(52, 2))
  ft:add_le(f.flag_unknown, tvb(52, 2))
  t:add_le(f.payload_len_hi, tvb(54, 2))
  t:add_le(f.immediate, tvb(56, 4))
  t:add_le(f.payload_crc, tvb(60, 4))

  local flags = le16(tvb, 52)
  local payload_len = le16(tvb, 48) + le16(tvb, 54) * 65536
  local have = tvb:len() - 64
  local names = {}
  if bit32.band(flags, 0x20) ~= 0 then names[#names + 1] = "FIRST" end
  if bit32.band(flags, 0x02) ~= 0 then names[#names + 1] = "LAST" end
  if bit32.band(flags, 0x01) ~= 0 then names[#names + 1] = "RETX" end
  if bit32.band(flags, 0x04) ~= 0 then names[#names + 1] = "IMM" end
  if bit32.band(flags, 0x10) ~= 0 then names[#names + 1] = "CRC" end
  if bit32.band(flags, 0x08) ~= 0 then names[#names + 1] = "TRIMMED" end
  ft:append_text(" (" .. table.concat(names, ",") .. ")")

  local trimmed = (have == 0 and payload_len > 0) or
                  bit32.band(flags, 0x08) ~= 0
  t:add(f.trimmed, trimmed):set_generated()
  if have > 0 then
    local pi = t:add(f.payload, tvb(64, have))
    if have ~= payload_len then pi:add_proto_expert_info(ef_bad_len) end
  end
  info = info .. string.format(" conn=%u psn=%u msn=%u off=%u len=%u path=%u",
                               le32(tvb, 8), le32(tvb, 12), le32(tvb, 16),
                               le32(tvb, 20), payload_len, le16(tvb, 50))
  if trimmed then info = info .. " [TRIMMED]" end
  return info
end

local function dissect_sack(tvb, pinfo, t, info)
  t:add_le(f.cum_psn, tvb(12, 4))
  t:add_le(f.echo_ts, tvb(16, 8))
  t:add_le(f.bytes_received, tvb(24, 8))
  local bt = t:add(f.bitmap, tvb(32, 32))
  local marked = 0
  for w = 0, 3 do
    bt:add_le(f.bitmap_word, tvb(32 + 8 * w, 8))
    marked = marked + popcount64(tvb, 32 + 8 * w)
  end
  bt:add(f.sacked, marked):set_generated()
  t:add_le(f.bitmap_base, tvb(64, 4))
  t:add_le(f.trigger_psn, tvb(68, 4))
  t:add_le(f.ooo_count, tvb(72, 4))
  t:add_le(f.echo_path, tvb(76, 2))
  t:add_le(f.rx_window_penalty, tvb(78, 2))
  t:add_le(f.coalesced, tvb(80, 2))
  t:add(f.ecn_seen, tvb(82, 1))
  t:add(f.reserved, tvb(83, 1))
  return info .. string.format(" conn=%u cum=%u base=%u sacked=%u ecn=%u",
                               le32(tvb, 8), le32(tvb, 12), le32(tvb, 64),
                               marked, tvb(82, 1):uint())
end

local function dissect_nack(tvb, pinfo, t, info)
  t:add_le(f.psn, tvb(12, 4))
  t:add_le(f.cum_psn, tvb(16, 4))
  t:add(f.nack_reason, tvb(20, 1))
  t:add(f.ecn_seen, tvb(21, 1))
  t:add_le(f.echo_path, tvb(22, 2))
  t:add_le(f.echo_ts, tvb(24, 8))
  local reason = nack_reasons[tvb(20, 1):uint()] or "UNKNOWN"
  return info .. string.format(" conn=%u psn=%u cum=%u %s", le32(tvb, 8),
                               le32(tvb, 12), le32(tvb, 16), reason)
end

local function dissect_probe(tvb, pinfo, t, info)
  t:add_le(f.probe_seq, tvb(12, 4))
  t:add_le(f.send_ts, tvb(16, 8))
  t:add_le(f.path_id, tvb(24, 2))
  t:add_le(f.reserved, tvb(26, 2))
  return info .. string.format(" conn=%u path=%u seq=%u", le32(tvb, 8),
                               le16(tvb, 24), le32(tvb, 12))
end

local function dissect_connect(tvb, pinfo, t, info)
  t:add_le(f.src_conn, tvb(12, 4))
  t:add_le(f.nonce, tvb(16, 8))
  t:add_le(f.mtu_payload, tvb(24, 4))
  local ft = t:add_le(f.connect_flags, tvb(28, 4))
  ft:add_le(f.connect_flag_crc, tvb(28, 4))
  t:add_le(f.num_paths, tvb(32, 2))
  t:add_le(f.num_planes, tvb(34, 2))
  return info .. string.format(" src=%u dst=%u paths=%u planes=%u mtu=%u",
                               le32(tvb, 12), le32(tvb, 8), le16(tvb, 32),
                               le16(tvb, 34), le32(tvb, 24))
end

local function dissect_plane(tvb, pinfo, t, info)
  t:add_le(f.planes_down, tvb(12, 4))
  t:add_le(f.plane_seq, tvb(16, 4))
  return info .. string.format(" conn=%u down=0x%x seq=%u", le32(tvb, 8),
                               le32(tvb, 12), le32(tvb, 16))
end

local dissectors = {
  [1] = dissect_data, [2] = dissect_sack, [3] = dissect_nack,
  [4] = dissect_probe, [5] = dissect_probe, [6] = dissect_connect,
  [7] = dissect_connect, [8] = dissect_plane,
}

function prismtp.dissector(tvb, pinfo, tree)
  if tvb:len() < 12 then return 0 end
  pinfo.cols.protocol = "PRISM"
  local t = tree:add(prismtp, tvb())
  t:add_le(f.magic, tvb(0, 2))
  t:add(f.version, tvb(2, 1))
  t:add(f.type, tvb(3, 1))
  local crc_item = t:add_le(f.hdr_crc, tvb(4, 4))
  t:add_le(f.dst_conn, tvb(8, 4))

  local ty = tvb(3, 1):uint()
  local name = types[ty] or string.format("TYPE_%u", ty)
  local hdr = header_size[ty]
  if le16(tvb, 0) ~= kMagic or tvb(2, 1):uint() ~= kVersion or hdr == nil then
    pinfo.cols.info = "Prism (not v1 or unknown type) " .. name
    return tvb:len()
  end
  if tvb:len() < hdr then
    t:add_proto_expert_info(ef_short)
    pinfo.cols.info = name .. " [TRUNCATED]"
    return tvb:len()
  end
  t:set_len(hdr)
  local good = header_crc(tvb, hdr) == le32(tvb, 4)
  t:add(f.hdr_crc_status, good and 1 or 0):set_generated()
  if not good then crc_item:add_proto_expert_info(ef_bad_crc) end
  t:append_text(", " .. name)
  local info = dissectors[ty](tvb, pinfo, t, name)
  if not good then info = info .. " [BAD HEADER CRC]" end
  pinfo.cols.info = info
  return tvb:len()
end

-- Heuristic: magic + version + known type + enough bytes + good checksum.
local function heuristic(tvb, pinfo, tree)
  if tvb:len() < 12 then return false end
  if le16(tvb, 0) ~= kMagic or tvb(2, 1):uint() ~= kVersion then
    return false
  end
  local hdr = header_size[tvb(3, 1):uint()]
  if hdr == nil or tvb:len() < hdr then return false end
  if header_crc(tvb, hdr) ~= le32(tvb, 4) then return false end
  prismtp.dissector(tvb, pinfo, tree)
  return true
end

DissectorTable.get("udp.port"):add(kDefaultUdpPort, prismtp)
prismtp:register_heuristic("udp", heuristic)
