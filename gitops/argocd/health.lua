-- Argo CD health check for raytrain.dev/TrainJob.
--
-- The TrainJob status is kstatus-compatible: a top-level status.observedGeneration, and the
-- abnormal-true conditions Reconciling/Stalled present only while true. Next to them sit the
-- Job-like conditions Created, Running, Suspended, Succeeded and Failed (True/False).
-- A TrainJob runs to completion, so, like batch/Job, it stays Progressing while it trains and
-- turns Healthy only once it has Succeeded: sync waves and PostSync hooks can wait for training.
local hs = { status = "Progressing", message = "Waiting for the raytrain operator" }

if obj.status == nil then
  return hs
end

-- A spec change the operator has not seen yet: whatever the conditions say is stale.
local generation = obj.metadata and obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and (observed == nil or observed < generation) then
  hs.message = "Waiting for the raytrain operator to observe generation " .. tostring(generation)
  return hs
end

local conditions = {}
if obj.status.conditions ~= nil then
  for _, condition in ipairs(obj.status.conditions) do
    conditions[condition.type] = condition
  end
end

local function isTrue(name)
  return conditions[name] ~= nil and conditions[name].status == "True"
end

local function describe(name)
  local c = conditions[name]
  local reason = c.reason or name
  if c.message ~= nil and c.message ~= "" then
    return reason .. ": " .. c.message
  end
  return reason
end

if isTrue("Failed") then
  hs.status = "Degraded"
  hs.message = describe("Failed")
  return hs
end
if isTrue("Stalled") then
  hs.status = "Degraded"
  hs.message = describe("Stalled")
  return hs
end
if isTrue("Succeeded") then
  hs.status = "Healthy"
  hs.message = describe("Succeeded")
  return hs
end
if isTrue("Suspended") then
  hs.status = "Suspended"
  hs.message = describe("Suspended")
  return hs
end

-- Pending or running: Progressing, with the trainer's progress when it has reported some.
local phase = obj.status.phase or "Pending"
local trainer = obj.status.trainerStatus
if isTrue("Running") and trainer ~= nil and trainer.progressPercentage ~= nil then
  local message = "Running: " .. tostring(math.floor(trainer.progressPercentage)) .. "% done"
  if trainer.estimatedRemainingSeconds ~= nil then
    message = message .. ", about " .. tostring(math.floor(trainer.estimatedRemainingSeconds)) .. "s left"
  end
  hs.message = message
elseif isTrue("Running") then
  hs.message = describe("Running")
elseif isTrue("Reconciling") then
  hs.message = describe("Reconciling")
else
  hs.message = phase
end
return hs
